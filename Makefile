# The two commands: `make demo` and `make test`. Both install what is missing first.
BUILD ?= build
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
# The retry soak (~11 min) is not part of `make test`: `cd build && ctest -L soak`.
CTEST_FLAGS ?= -LE soak

.PHONY: setup configure build test fuzz sanitize demo mnist bench clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $$(nproc)

test: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 900 $(CTEST_FLAGS)

# Every libFuzzer target for FUZZ_SECONDS each (`make test` runs them for 4 s each).
FUZZ_SECONDS ?= 60
fuzz: build
	@cd $(BUILD) && FUZZ_SECONDS=$(FUZZ_SECONDS) ctest -L fuzz --output-on-failure --timeout 0

# The unit tests under AddressSanitizer and UndefinedBehaviorSanitizer, in their own build
# directory (no benchmarks, no fuzzers). Not part of `make test`: see README ("Sanitizers")
# for what it costs.
SANITIZE_BUILD ?= build-sanitize
sanitize: setup
	@cmake -S . -B $(SANITIZE_BUILD) -G Ninja $(CMAKE_FLAGS) -DCADRE_SANITIZE=ON -DCADRE_BENCH=OFF -DCADRE_FUZZ=OFF >/dev/null
	@cmake --build $(SANITIZE_BUILD) -j $$(nproc)
	@cd $(SANITIZE_BUILD) && ASAN_OPTIONS=$(ASAN_OPTIONS_SANITIZE) UBSAN_OPTIONS=print_stacktrace=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitize/lsan.supp ctest -L unit --output-on-failure $(CTEST_FLAGS) \
	  -E '$(SANITIZE_EXCLUDE)'
ASAN_OPTIONS_SANITIZE ?= detect_leaks=1:abort_on_error=1
# Tests that load the SentencePiece shim into a process holding libtorch's protobuf: the shim
# needs dlopen(RTLD_DEEPBIND) to keep its own protobuf apart, which the sanitizers' runtimes
# refuse (google/sanitizers#611), and without it the two protobufs clash at load.
SANITIZE_EXCLUDE ?= ^(Detokenize|ChatTemplates)\.

# The demo needs only the binary (and the tokenizer shim it loads), not the tests.
demo: configure
	@cmake --build $(BUILD) -j $$(nproc) --target cadre
	@bash scripts/demo.sh $(BUILD)

# The second model: ResNet on MNIST digits, 2 DDP workers, accuracy per evaluation and a plot.
mnist: configure
	@cmake --build $(BUILD) -j $$(nproc) --target cadre
	@bash scripts/mnist.sh $(BUILD)

bench: build
	@/usr/bin/python3 bench/train_throughput.py --build $(BUILD)

clean:
	rm -rf $(BUILD)
