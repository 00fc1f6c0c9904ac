# shellcheck shell=bash
# Shared by the benchmark drivers (source it; the caller defines die, out and timeout_s).
# shellcheck disable=SC2154  # out and timeout_s: defined by the sourcing script
#
# run NAME JSON COMMAND...: runs COMMAND under `timeout`, its output shown and kept in
# OUT/NAME.log; stops the script if it fails, outlasts timeout_s or writes no JSON. `timeout`
# signals its whole process group, so launched ranks go with it. Records the command in
# run_commands (as --run "NAME: COMMAND", for the tables' headers) and the JSON in run_jsons.
run_commands=()
run_jsons=()
run() {
  local name="$1" json="$2"
  shift 2
  rm -f "$json"  # A stale file from an earlier run must never be merged.
  echo "+ $*"
  run_commands+=(--run "$name: $*")
  local status=0
  timeout --kill-after=10 "$timeout_s" "$@" 2>&1 | tee "$out/$name.log" || status=${PIPESTATUS[0]}
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    die "$name ran past ${timeout_s}s and was killed (log: $out/$name.log)"
  fi
  [ "$status" -eq 0 ] || die "$name failed with exit status $status (log: $out/$name.log)"
  [ -s "$json" ] || die "$name exited 0 but wrote no $json"
  run_jsons+=("$json")
  echo
}
