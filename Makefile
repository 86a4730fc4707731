# The two commands: `make demo` and `make test`. Both install what is missing first.
BUILD ?= build
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
# The soaks are not part of `make test`: `make soak` (recovery, over an hour) and the Slurm retry
# soak (~11 min, `cd build && ctest -R DeploySbatchRetrySoak`). Nor are the
# `cuda` tests (they need a GPU: `make gpu-check` runs them); the `gpucheck` rehearsal runs in
# the libtorch 2.x part only (TORCH2_EXCLUDE). Nor is `kernels-extra` (ATen's unvectorised
# kernels, which no machine of this fleet takes: `cd build && ctest -L kernels-extra`).
CTEST_EXCLUDE ?= soak|cuda|gpucheck|kernels-extra
TORCH2_EXCLUDE ?= soak|cuda|kernels-extra
CTEST_FLAGS ?= -LE '^($(CTEST_EXCLUDE))$$'
# `unit` tests are in-process and single-threaded (each gtest case its own process, most of its
# time spent loading libtorch), and so are the `fuzz` runs (one libFuzzer process each, for a
# fixed FUZZ_SECONDS): they run $(nproc) at a time; every other label runs one test at a
# time, as the multi-process tests' ranks need the cores. Both passes run even when one fails.
# $(1): ctest's -L option choosing the labels to run (empty: all), $(2): the labels to leave out.
CTEST_SPLIT = run_ctest() { ctest --output-on-failure --timeout 900 "$$@"; }; \
  run_ctest -j $$(nproc) -L '^(unit|fuzz)$$' -LE '^($(2))$$'; unit=$$?; \
  run_ctest $(1) -LE '^(unit|fuzz|$(2))$$'; rest=$$?; \
  [ $$unit -eq 0 ] && [ $$rest -eq 0 ]

.PHONY: setup setup-torch configure build test test-torch1 test-torch2 torch2-build gpu-bundle gpu-check fuzz soak sanitize demo finetune mnist vision bench clean

setup:
	@bash scripts/setup.sh

# Also PyPI's torch 2.11 (+ the Python references) into the project venv and the gloo headers
# for the libtorch 2.x build: ~2.8 GB downloaded on a first run (docs/TORCH2.md).
setup-torch:
	@bash scripts/setup.sh --torch

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $$(nproc)

# Both builds: (1) the whole suite on Debian's libtorch 1.13, then (2) the unit tests and the
# `torch2` multi-process set on PyPI's libtorch 2.11 with the CUDA code paths compiled (run on the
# CPU). The second runs even when the first fails; the exit status is 1 if either failed.
# torch 2.11 (setup-torch: 2.65 GB downloaded, 4.95 GB installed; 1.8 min on a fresh machine with a
# fast link, up to ~14 min with a slow one; network and disk more than CPU) is installed while the
# 1.13 tree builds; the 1.13 suite's Python references need it, so its tests wait for it.
VENV ?= $(or $(CADRE_VENV),$(HOME)/.cache/cadre/venv)
# The 2.x tree is compiled while the 1.13 suite runs, under SCHED_IDLE: most of that suite's
# multi-process tests leave the cores idle while they wait (timeouts, heartbeats, Slurm, etcd),
# and an idle-policy task runs only then: any runnable test process preempts it at once, so the
# tests' ranks keep the cores they had. nice 19 where the kernel refuses SCHED_IDLE.
IDLE_PRIORITY ?= $(shell chrt --idle 0 true 2>/dev/null && echo chrt --idle 0 || echo nice -n 19)
test: setup
	@mkdir -p $(BUILD); \
	echo "make test: installing torch 2.11 into $(VENV) beside the 1.13 build ($(BUILD)/setup-torch.log)"; \
	bash scripts/setup_torch.sh "$(VENV)" >$(BUILD)/setup-torch.log 2>&1 & torch_pid=$$!; \
	$(MAKE) --no-print-directory build; built=$$?; \
	if ! wait $$torch_pid; then cat $(BUILD)/setup-torch.log >&2; echo "make test: setup-torch failed" >&2; exit 1; fi; \
	cat $(BUILD)/setup-torch.log; \
	if [ $$built -ne 0 ]; then echo "make test: the libtorch 1.13 build failed" >&2; fi; \
	failed=""; \
	echo "make test: building the libtorch 2.x tree at idle priority beside the 1.13 suite ($(BUILD)/build-torch2.log)"; \
	$(IDLE_PRIORITY) $(MAKE) --no-print-directory torch2-build >$(BUILD)/build-torch2.log 2>&1 & torch2_pid=$$!; \
	$(MAKE) --no-print-directory test-torch1 || failed="$$failed test-torch1"; \
	wait $$torch2_pid || echo "make test: the idle 2.x build failed; test-torch2 builds again and shows why"; \
	$(MAKE) --no-print-directory test-torch2 || failed="$$failed test-torch2"; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed" >&2; exit 1; fi

test-torch1: build
	@echo "== libtorch 1.13 (Debian): the whole suite in $(BUILD)/"
	@cd $(BUILD) && $(call CTEST_SPLIT,,$(CTEST_EXCLUDE))

# libtorch 2.x from the project venv's torch wheel (or your own: TORCH2_PREFIX=<dir holding
# share/cmake/Torch>), C++20, CADRE_CUDA=ON against the CUDA toolkit and NCCL. No benchmarks,
# fuzzers, or test programs with no test it runs (CADRE_TEST_LABELS, tests/CMakeLists.txt). `unit` + `torch2` (the multi-process set named in tests/CMakeLists.txt) + `kernels`
# (tests/kernels/: the parity and equivalence tests under each CPU kernel choice).
TORCH2_BUILD ?= build-torch2
TORCH2_PREFIX ?= $$($(VENV)/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')
TORCH2_CMAKE_FLAGS ?= -DCADRE_CUDA=ON -DCADRE_BENCH=OFF -DCADRE_FUZZ=OFF '-DCADRE_TEST_LABELS=unit;torch2;kernels'
test-torch2: setup-torch
	@echo "== libtorch 2.x (PyPI wheel, CADRE_CUDA=ON): unit + torch2 tests in $(TORCH2_BUILD)/"
	@$(MAKE) --no-print-directory torch2-build
	@cd $(TORCH2_BUILD) && $(call CTEST_SPLIT,-L '^(torch2|kernels)$$',$(TORCH2_EXCLUDE))

# The 2.x tree alone, without the set-up (test-torch2 and test run it first).
torch2-build:
	@cmake -S . -B $(TORCH2_BUILD) -G Ninja $(CMAKE_FLAGS) -DCMAKE_PREFIX_PATH="$(TORCH2_PREFIX)" \
	  $(TORCH2_CMAKE_FLAGS) >/dev/null
	@cmake --build $(TORCH2_BUILD) -j $$(nproc)

# What the GPU machine needs beside the working tree, in one file under 64 MiB (docs/gpu.md): the
# Debian packages Cadre builds against and the pinned gloo sources, .dev/gpu-bundle.tar. Run here
# (apt and deb.debian.org), then carry that file to the device.
gpu-bundle: setup
	@bash scripts/gpu_bundle.sh

# On a machine with a GPU (docs/gpu.md): build with CUDA, the `cuda` tests, the small and 0.9B
# Llama against PyTorch eager and compiled, CPU/GPU parity and checkpoint round trip, a table.
# Exits 1 saying so when there is no GPU; `make gpu-check GPU_CHECK_FLAGS="--device cpu --tiny"`
# is the CPU rehearsal. Needs no registry: `make gpu-bundle` wrote .dev/gpu-bundle.tar beforehand.
GPU_CHECK_FLAGS ?=
gpu-check:
	@bash scripts/gpu_check.sh $(GPU_CHECK_FLAGS)

# Every libFuzzer target for FUZZ_SECONDS each (`make test` runs them for 4 s each).
FUZZ_SECONDS ?= 60
fuzz: build
	@cd $(BUILD) && FUZZ_SECONDS=$(FUZZ_SECONDS) ctest -L fuzz --output-on-failure --timeout 0

# The recovery soak (issue #26; root, network namespaces): SOAK_FAULTS faults drawn at random
# (SOAK_SEED repeats a draw) against three-host jobs under --recovery memory; prints a table per
# fault kind and writes soak.json, soak.md and the plot soak.png to $(BUILD)/soak/. SOAK_STRATEGY
# (default NO_SHARD; FULL_SHARD: sharded state copied to peers every SOAK_MEMORY_INTERVAL steps).
SOAK_FAULTS ?= 100
SOAK_SEED ?=
SOAK_STRATEGY ?= NO_SHARD
SOAK_MEMORY_INTERVAL ?= 10
soak: build
	@mkdir -p $(BUILD)/soak
	@CADRE_SOAK_FAULTS=$(SOAK_FAULTS) $(if $(SOAK_SEED),CADRE_SOAK_SEED=$(SOAK_SEED)) \
	  CADRE_SOAK_STRATEGY=$(SOAK_STRATEGY) CADRE_SOAK_MEMORY_INTERVAL=$(SOAK_MEMORY_INTERVAL) \
	  CADRE_SOAK_OUT=$(abspath $(BUILD))/soak $(BUILD)/tests/soak/test_recovery_soak; rc=$$?; \
	  /usr/bin/python3 $(CURDIR)/tests/soak/plot_soak.py $(abspath $(BUILD))/soak/soak.json; exit $$rc

# The unit tests under AddressSanitizer and UndefinedBehaviorSanitizer, in their own build
# directory (no benchmarks, no fuzzers). Not part of `make test`: see docs/testing.md ("Fuzzing and sanitizers")
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

# Fine-tuning on instruction data (scripts/finetune.sh): the demo's model (its first chunk trained
# first if there is none), the repository's small instruction set, the masked held-out loss as it
# falls, then the model served and asked through the openai client. LORA=1: LoRA adapters on a
# frozen base instead, exported as a PEFT adapter and merged for serving.
finetune: configure
	@cmake --build $(BUILD) -j $$(nproc) --target cadre
	@LORA=$(LORA) bash scripts/finetune.sh $(BUILD)

# The second model: ResNet on MNIST digits, 2 DDP workers, accuracy per evaluation and a plot.
mnist: configure
	@cmake --build $(BUILD) -j $$(nproc) --target cadre
	@bash scripts/mnist.sh $(BUILD)

# Vision on an image folder: a generated JPEG/PNG ImageFolder, encoded shards, a small ResNet
# with 2 DDP workers decoding and augmenting at load time; prints the accuracy reached.
vision: configure
	@cmake --build $(BUILD) -j $$(nproc) --target cadre
	@bash scripts/vision.sh $(BUILD)

bench: build
	@/usr/bin/python3 bench/train_throughput.py --build $(BUILD)

clean:
	rm -rf $(BUILD)
