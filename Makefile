# berth: `make dev` builds and starts a single-process dev agent,
# `make test` builds and runs every test.  Both install missing Debian
# packages first (scripts/install-deps.sh).  `make bench` builds and runs
# the benchmarks (bench/run.py; numbers and bench/report.json, no pass/fail).
BUILD_DIR ?= build
JOBS ?= 2
DATA_DIR ?= $(CURDIR)/.dev/data

.PHONY: deps configure build dev test bench clean

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

dev: build
	$(BUILD_DIR)/apps/berthd/berthd --dev --data-dir $(DATA_DIR)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

bench: build
	/usr/bin/python3 bench/run.py --build $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
