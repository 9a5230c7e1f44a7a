#!/usr/bin/env bash
# Runs every test of a sanitizer build (make test-asan, make test-tsan) and
# fails when any sanitizer reported anything, in any process: the tests
# start berthd, berth and berth-hostpath as child processes, whose reports
# would otherwise only land in their logs.  Each report is a file in
# BUILD/sanitizer-logs/ (log_path), listed at the end.
#
# usage: scripts/sanitize-test.sh BUILD_DIR [JOBS [CTEST-ARGS...]], e.g. -R integration.cluster
set -u
build=$(cd "$1" && pwd)
jobs=${2:-1}
shift $(( $# >= 2 ? 2 : $# ))
src=$(cd "$(dirname "$0")/.." && pwd)
logs="$build/sanitizer-logs"
rm -rf "$logs" && mkdir -p "$logs"

# halt_on_error/abort_on_error: a report also fails the process (and so its test).
export ASAN_OPTIONS="log_path=$logs/asan:abort_on_error=1:detect_leaks=1:strict_string_checks=1"
export LSAN_OPTIONS="suppressions=$src/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1:suppressions=$src/tests/sanitizers/ubsan.supp"
export TSAN_OPTIONS="log_path=$logs/tsan:halt_on_error=0:second_deadlock_stack=1:suppressions=$src/tests/sanitizers/tsan.supp:print_suppressions=0"

# Tests with deadlines stretch them by this factor (e.g. test_cluster.py's
# wait for a client's plugin to turn healthy).
export BERTH_TEST_TIME_SCALE=${BERTH_TEST_TIME_SCALE:-4}

cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 1800 "$@"
status=$?

reports=$(find "$logs" -type f -size +0 | sort)
if [ -n "$reports" ]; then
  echo "sanitizer reports (in $logs):"
  for f in $reports; do
    echo "== $f"
    grep -E "^(ERROR|WARNING|SUMMARY):|runtime error" "$f" | head -5
  done
  status=1
fi
if [ "$status" -eq 0 ]; then echo "sanitizers: every test passed, no reports"; fi
exit "$status"
