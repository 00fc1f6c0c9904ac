#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (built by `make fuzz`), SECONDS each, FUZZ_JOBS
# (default: the cores) at a time, and prints one line per target; the full output of each is in
# DIR/<target>.log.
#
#   scripts/fuzz.sh DIR SECONDS TARGET...
#
# Each target starts from its committed seeds (tests/fuzz/corpus/<target>, copied so that they
# stay as committed) plus what earlier runs in DIR added to DIR/corpus-<target>; libFuzzer runs
# every input there once before mutating. A crash, a leak, a sanitizer report, an input slower
# than 10 s or an allocation over 2 GiB fails the target, and the input is saved as
# DIR/<target>-crash-<sha1> (or -leak-, -timeout-, -oom-): reproduce with `DIR/<target> FILE`.
# Every target runs even after one failed; the exit code is 1 if any did.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 DIR SECONDS TARGET..." >&2; exit 2; }
dir=$1 seconds=$2 jobs=${FUZZ_JOBS:-$(nproc)}
shift 2
# fuzz_one TARGET: one target's run; its summary line (and the end of its log on a failure) in
# DIR/TARGET.result, its exit code in DIR/TARGET.code.
fuzz_one() {
  local target=$1 corpus=$dir/corpus-$1 log=$dir/$1.log code runs size
  mkdir -p "$corpus"
  cp tests/fuzz/corpus/"$target"/* "$corpus"/
  "$dir/$target" -max_total_time="$seconds" -max_len=4096 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$dir/$target-" "$corpus" >"$log" 2>&1
  code=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  size=$(find "$corpus" -type f | wc -l)
  if [ "$code" -eq 0 ]; then
    printf '%-16s passed: %s runs in %s s, corpus %s inputs\n' "$target" "${runs:-?}" \
      "$seconds" "$size" >"$dir/$target.result"
  else
    { printf '%-16s FAILED (exit %s) after %s runs; the end of %s:\n' "$target" "$code" \
        "${runs:-?}" "$log"
      tail -n 40 "$log" | sed 's/^/    /'; } >"$dir/$target.result"
  fi
  echo "$code" >"$dir/$target.code"
}

# JOBS targets at a time (each fuzzer is one process on one core, so each still gets SECONDS of
# a core to itself), then one summary line per target in the order given.
failed=()
for target in "$@"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  rm -f "$dir/$target.code"
  fuzz_one "$target" &
done
wait
for target in "$@"; do
  cat "$dir/$target.result"
  [ "$(cat "$dir/$target.code" 2>/dev/null)" = 0 ] || failed+=("$target")
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz: ${failed[*]} failed (inputs saved in $dir as <target>-crash-*, -leak-, -timeout-, -oom-)"
  exit 1
fi
