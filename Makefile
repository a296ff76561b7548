# The two commands a new user runs: `make demo` and `make test`. Both install what is missing
# (scripts/install-deps.sh), configure with CMake and build into build/.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX     ?= /usr/local
MAKEFLAGS  += --no-print-directory

.PHONY: all deps deps-test build asan test demo bench clean format install

all: build

deps:
	@scripts/install-deps.sh

deps-test:
	@scripts/install-deps.sh --with-torch
	@scripts/setup-test-venv.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

asan: deps
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DPIPEC_SANITIZE=ON >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)

# Every test, in the release tree and again under AddressSanitizer + UBSan.
test: deps-test build asan
	@echo "== tests (release build)"
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	@echo "== tests (ASan + UBSan build)"
	@ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(JOBS)

# pipec, the runtime, the CMake package and pkg-config files, docs and samples under PREFIX
# (DESTDIR=DIR stages them under DIR; docs/build-integration.md).
install: build
	@DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"

demo: build
	@scripts/demo.sh $(BUILD)/bin/pipec

bench: build
	@bench/run.sh $(BUILD)/bin/pipec

format:
	@clang-format -i ir/*.[ch] compiler/*.[ch] driver/*.[ch] codegen/*.[ch] runtime/*.[ch] runtime/cuda/*.cu \
	  runtime/cuda/*.cuh runtime/cuda/*.h tests/unit/*.c

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
