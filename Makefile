# The two commands: `make demo` and `make test`. Both install what is missing first.
BUILD ?= build
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
CTEST_FLAGS ?=

.PHONY: setup configure build test demo mnist bench clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $$(nproc)

test: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 900 $(CTEST_FLAGS)

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
