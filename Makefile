# berth: `make dev` builds and starts a single-process dev agent,
# `make test` builds and runs every test.  Both install missing Debian
# packages first (scripts/install-deps.sh).  `make bench` builds and runs
# the benchmarks (bench/run.py; numbers and bench/results/report.json, no pass/fail;
# installs Debian's etcd-server and etcd-client for the side-by-side run;
# BENCH_ARGS are passed on, e.g. BENCH_ARGS="--scale 100000").
# `make chaos` builds and runs the long fault-injection run (tests/fault/,
# docs/testing.md): CHAOS_FAULTS faults (default 100) of CHAOS_KINDS (default
# all: partition-client everywhere, cutting a client off the servers past the
# node-down timeout; partition-leader/follower, and partition-client cutting
# every connection both ways, only as root), seed CHAOS_SEED (default random;
# printed), output kept in CHAOS_OUT.
# `make test-asan` / `make test-tsan` build (build-asan, build-tsan) and run
# the unit and integration tests under ASan+UBSan / TSan; `make fuzz` builds
# the libFuzzer targets with clang (build-fuzz) and runs each for
# FUZZ_SECONDS.
# `make test-quick` builds and runs the quick tier (ctest labels unit, sim
# and smoke: the unit tests, the claim simulation's short run, a few smoke
# tests with real processes), for iteration; docs/testing.md lists every
# tier with its time.
# CMAKE_ARGS go to every configure, e.g. CMAKE_ARGS=-DBERTH_DEBUG_INFO=full
# for full debug information (docs/building.md).
# `make sim` builds and runs the claim workflow simulation (tests/sim/,
# docs/testing.md) for SEEDS seeds (default 100000) from SEED_FIRST
# (default 1); `make test` runs a short default of it.
BUILD_DIR ?= build
ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
JOBS ?= 2
DATA_DIR ?= $(CURDIR)/.dev/data
CHAOS_FAULTS ?= 100
CHAOS_SEED ?=
CHAOS_KINDS ?= all
CHAOS_OUT ?= $(CURDIR)/.chaos
BENCH_ARGS ?=
SEEDS ?= 100000
SEED_FIRST ?= 1
CMAKE_ARGS ?=

.PHONY: deps configure build dev test test-quick bench chaos clean test-asan test-tsan fuzz sim

deps:
	@bash scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

dev: build
	$(BUILD_DIR)/apps/berthd/berthd --dev --data-dir $(DATA_DIR)

# Every process the tests start carries BERTH_TEST_RUN; scripts/leftovers.py
# fails the run, naming them, when a process or mount of it is left.
test: build
	@export BERTH_TEST_RUN=$$$$-$$(date +%s); \
	python3 scripts/leftovers.py snapshot $(BUILD_DIR)/leftovers.json && \
	(cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600); status=$$?; \
	python3 scripts/leftovers.py check $(BUILD_DIR)/leftovers.json || status=1; \
	exit $$status

# The quick tier: what to run after each change (under 2 minutes).
test-quick: build
	@export BERTH_TEST_RUN=$$$$-$$(date +%s); \
	python3 scripts/leftovers.py snapshot $(BUILD_DIR)/leftovers.json && \
	(cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600 -L '^(unit|sim|smoke)$$'); status=$$?; \
	python3 scripts/leftovers.py check $(BUILD_DIR)/leftovers.json || status=1; \
	exit $$status

test-asan: deps
	@cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBERTH_SANITIZE=address,undefined $(CMAKE_ARGS) >/dev/null
	@cmake --build $(ASAN_DIR) -j $(JOBS)
	@export BERTH_TEST_RUN=$$$$-$$(date +%s); \
	python3 scripts/leftovers.py snapshot $(ASAN_DIR)/leftovers.json && \
	bash scripts/sanitize-test.sh $(ASAN_DIR) $(JOBS); status=$$?; \
	python3 scripts/leftovers.py check $(ASAN_DIR)/leftovers.json || status=1; \
	exit $$status

test-tsan: deps
	@cmake -S . -B $(TSAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBERTH_SANITIZE=thread $(CMAKE_ARGS) >/dev/null
	@cmake --build $(TSAN_DIR) -j $(JOBS)
	@export BERTH_TEST_RUN=$$$$-$$(date +%s); \
	python3 scripts/leftovers.py snapshot $(TSAN_DIR)/leftovers.json && \
	bash scripts/sanitize-test.sh $(TSAN_DIR) $(JOBS); status=$$?; \
	python3 scripts/leftovers.py check $(TSAN_DIR)/leftovers.json || status=1; \
	exit $$status

fuzz:
	@bash scripts/install-deps.sh clang libclang-rt-14-dev
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBERTH_FUZZ=ON $(CMAKE_ARGS) >/dev/null
	@cmake --build $(FUZZ_DIR) -j $(JOBS) --target fuzzers
	bash scripts/fuzz.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

sim: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target claim_sim_test
	BERTH_SIM_SEEDS=$(SEEDS) BERTH_SIM_FIRST=$(SEED_FIRST) $(BUILD_DIR)/tests/sim/claim_sim_test

bench: build
	/usr/bin/python3 bench/run.py --build $(BUILD_DIR) $(BENCH_ARGS)

chaos: build
	rm -rf $(CHAOS_OUT)
	# Copies of the binaries: a rebuild during the run does not pull them away.
	mkdir -p $(CHAOS_OUT)/bin
	cp $(BUILD_DIR)/apps/berthd/berthd $(BUILD_DIR)/apps/berth/berth \
	    $(BUILD_DIR)/apps/berth-hostpath/berth-hostpath \
	    $(BUILD_DIR)/apps/berth-alloc/berth-alloc $(CHAOS_OUT)/bin/
	BERTHD_BIN=$(CHAOS_OUT)/bin/berthd BERTH_BIN=$(CHAOS_OUT)/bin/berth \
	BERTH_HOSTPATH_BIN=$(CHAOS_OUT)/bin/berth-hostpath \
	BERTH_FAULT_SEED=$(CHAOS_SEED) \
	/usr/bin/python3 tests/fault/run_fault.py --faults $(CHAOS_FAULTS) --kinds $(CHAOS_KINDS) \
	    --out $(CHAOS_OUT) --verbose

clean:
	rm -rf $(BUILD_DIR)
