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

# The summary counts the reports of every process: the files the
# sanitizers wrote (log_path), and the tests' own output (ctest keeps it in
# Testing/Temporary/LastTest.log), where a process whose stderr went to a
# test's log (a berthd an integration test started) shows its report; a
# process a sanitizer stopped is never read as clean.
# A report's first line may carry the process id first (==PID==ERROR: ...).
pattern='^(==[0-9]+==)?(ERROR: (Address|Leak|Thread|UndefinedBehavior)Sanitizer|WARNING: ThreadSanitizer)|runtime error:'
reports=$(find "$logs" -type f -size +0 | sort)
files=0
total=0
for f in $reports; do
  n=$(grep -cE "$pattern" "$f" || true)
  files=$((files + 1))
  total=$((total + n))
  echo "== $f: $n report(s)"
  grep -E "$pattern|^SUMMARY:" "$f" | head -5
done
in_output=$(grep -cE "$pattern" Testing/Temporary/LastTest.log 2>/dev/null || true)
in_output=${in_output:-0}
if [ "$in_output" -gt 0 ]; then
  echo "== Testing/Temporary/LastTest.log (the tests' output): $in_output report(s)"
  grep -E "$pattern" Testing/Temporary/LastTest.log | sort | uniq -c | sort -rn | head -10
fi
echo "sanitizer summary: $total report(s) in $files file(s) under $logs, $in_output in the tests' output; ctest exit $status"
if [ "$files" -gt 0 ] || [ "$in_output" -gt 0 ]; then status=1; fi
if [ "$status" -eq 0 ]; then echo "sanitizers: every test passed, no reports"; fi
exit "$status"
