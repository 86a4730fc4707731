# The two commands: `make demo` and `make test`. Both install what is missing first.
BUILD ?= build
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
CTEST_FLAGS ?=

.PHONY: setup build test demo bench clean

setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $$(nproc)

test: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 900 $(CTEST_FLAGS)

demo: build
	@bash scripts/demo.sh $(BUILD)

bench: build
	@/usr/bin/python3 bench/train_throughput.py --build $(BUILD)

clean:
	rm -rf $(BUILD)
