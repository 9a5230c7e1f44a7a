#!/usr/bin/env bash
# Runs every libFuzzer target of a BERTH_FUZZ build for SECONDS each (make
# fuzz), starting from tests/fuzz/corpus/<target>/.  New coverage goes to
# BUILD/fuzz-corpus/<target>/ (not into the repository); a crash leaves
# crash-* in BUILD/fuzz-crashes/<target>/: copy it to
# tests/fuzz/corpus/<target>/ as a regression input, fix the bug, and
# ctest fuzz.replay.<target> keeps it fixed.
#
# usage: scripts/fuzz.sh BUILD_DIR [SECONDS] [TARGET...]
set -u
build=$(cd "$1" && pwd)
seconds=${2:-60}
shift $(( $# >= 2 ? 2 : $# ))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(spec entry shell hostpath policy)
src=$(cd "$(dirname "$0")/.." && pwd)
status=0
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$t"
  corpus="$build/fuzz-corpus/$t"
  crashes="$build/fuzz-crashes/$t"
  mkdir -p "$corpus" "$crashes"
  echo "== fuzz_$t for ${seconds}s"
  # -close_fd_mask=1: the shell target prints help and usage to stdout.
  # ASan: leaks are reported by libFuzzer itself (-detect_leaks).
  if ! "$bin" "$corpus" "$src/tests/fuzz/corpus/$t" -max_total_time="$seconds" \
      -artifact_prefix="$crashes/" -close_fd_mask=1 -print_final_stats=1 -max_len=4096 \
      -timeout=10 -rss_limit_mb=4096 2> "$build/fuzz-$t.log"; then
    echo "fuzz_$t FAILED: see $build/fuzz-$t.log and $crashes/"
    grep -E "ERROR|SUMMARY|==[0-9]+==" "$build/fuzz-$t.log" | head -5
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::average_exec_per_sec|^#[0-9]+.*DONE" \
    "$build/fuzz-$t.log" | tr '\n' ' '
  echo
done
exit $status
