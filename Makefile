# berth: `make dev` builds and starts a single-process dev agent,
# `make test` builds and runs every test.  Both install missing Debian
# packages first (scripts/install-deps.sh).  `make bench` builds and runs
# the benchmarks (bench/run.py; numbers and bench/report.json, no pass/fail).
# `make chaos` builds and runs the long fault-injection run (tests/fault/,
# docs/testing.md): CHAOS_FAULTS faults (default 100) of CHAOS_KINDS (default
# all; partitions only as root), seed CHAOS_SEED (default random; printed), output kept in CHAOS_OUT.
BUILD_DIR ?= build
JOBS ?= 2
DATA_DIR ?= $(CURDIR)/.dev/data
CHAOS_FAULTS ?= 100
CHAOS_SEED ?=
CHAOS_KINDS ?= all
CHAOS_OUT ?= $(CURDIR)/.chaos

.PHONY: deps configure build dev test bench chaos clean

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

chaos: build
	rm -rf $(CHAOS_OUT)
	BERTHD_BIN=$(BUILD_DIR)/apps/berthd/berthd BERTH_BIN=$(BUILD_DIR)/apps/berth/berth \
	BERTH_HOSTPATH_BIN=$(BUILD_DIR)/apps/berth-hostpath/berth-hostpath \
	BERTH_FAULT_SEED=$(CHAOS_SEED) \
	/usr/bin/python3 tests/fault/run_fault.py --faults $(CHAOS_FAULTS) --kinds $(CHAOS_KINDS) \
	    --out $(CHAOS_OUT) --verbose

clean:
	rm -rf $(BUILD_DIR)
