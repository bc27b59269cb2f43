# Top-level entry points. `make demo` and `make test` work on a fresh Debian machine: both
# install what is missing (scripts/install-deps.sh), configure and build, then run.
BUILD_DIR ?= build
SANITIZE_DIR ?= build-sanitize
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build build-anvil test test-unit test-sanitize fuzz demo clean

all: build

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD_DIR).configure.log 2>&1 || (cat $(BUILD_DIR).configure.log; exit 1)
	@grep "anvil summary" $(BUILD_DIR).configure.log || true

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The anvil executable and its libraries only (no test binaries, benchmarks or fuzz replays).
build-anvil: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target anvil

# The whole suite; CTest's own summary is the last thing printed.
test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 900

test-unit: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L unit

# The unit tier under AddressSanitizer and UndefinedBehaviorSanitizer; Open MPI's own leaks at
# exit are suppressed (tests/lsan_mpi.supp). The fine-tuning accuracy test (600 training steps
# and a hundred generate runs, past its timeout in a Debug + ASan build) is left to `make test`;
# the short fine-tuning tests run the same code here.
test-sanitize: deps
	@cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DANVIL_SANITIZE=ON -DANVIL_ENABLE_CUDA=OFF > $(SANITIZE_DIR).configure.log 2>&1 || (cat $(SANITIZE_DIR).configure.log; exit 1)
	@cmake --build $(SANITIZE_DIR) -j $(JOBS)
	@cd $(SANITIZE_DIR) && ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan_mpi.supp UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j $(JOBS) -L unit -E 'FinetuneSft(Test\.FullAndLora|\.isa_)'

# Builds every libFuzzer target with clang (address + undefined sanitizers) in build-fuzz/ and
# runs each for FUZZ_SECONDS, one after another or FUZZ_PARALLEL at once (fuzz/run.sh;
# FUZZ_TARGETS picks some). Needs clang and libclang-rt-dev, which are not project
# dependencies. `make test` replays each target's seeds and kept crashing inputs with the
# normal compiler (fuzz/CMakeLists.txt).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
FUZZ_PARALLEL ?= 1
fuzz:
	@FUZZ_PARALLEL=$(FUZZ_PARALLEL) bash fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Trains the tiny preset on the fortunes corpus (tokenizer + shards made on first use), then
# samples from it. A second `make demo` reuses runs/demo and only generates. It builds only
# what it runs (the anvil executable); `make build` or `make test` build the rest.
demo: build-anvil
	@$(BUILD_DIR)/anvil info
	@$(BUILD_DIR)/anvil train --run-dir runs/demo
	@$(BUILD_DIR)/anvil generate --run runs/demo --prompt "The " --max-new-tokens 120

clean:
	rm -rf $(BUILD_DIR) $(SANITIZE_DIR) build-fuzz $(BUILD_DIR).configure.log $(SANITIZE_DIR).configure.log
