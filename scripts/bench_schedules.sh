#!/usr/bin/env bash
# Exposed communication per schedule under an emulated link: `gradsync train` on synthetic data,
# the same model and steps for every schedule, REPEAT runs each (interleaved), medians reported.
#   scripts/bench_schedules.sh [--build build] [--model cnn] [--workers 2] [--bandwidth 100mbit]
#                              [--steps 30] [--repeat 3] [--schedules "fifo wfbp fusion:1 fusion:25"]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" model=cnn workers=2 bandwidth=100mbit steps=30 repeat=3
schedules="fifo wfbp fusion:1 fusion:25"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --model) model="$2" ;; --workers) workers="$2" ;;
    --bandwidth) bandwidth="$2" ;; --steps) steps="$2" ;; --repeat) repeat="$2" ;;
    --schedules) schedules="$2" ;;
    *) echo "bench_schedules: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for i in $(seq "$repeat"); do
  for s in $schedules; do
    timeout 900 "$build/apps/gradsync/gradsync" train --model "$model" --workers "$workers" \
      --dataset synthetic --steps "$steps" --bandwidth "$bandwidth" --schedule "$s" --quiet \
      --metrics "$out/${s//:/_}-$i.json" > /dev/null
  done
done
/usr/bin/python3 - "$out" "$schedules" "$repeat" <<'PY'
import json, statistics, sys
out, schedules, repeat = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
print("| schedule | step (ms) | compute (ms) | exposed communication (ms) | communication (ms) |")
print("|---|---:|---:|---:|---:|")
for s in schedules:
    runs = [json.load(open(f"{out}/{s.replace(':', '_')}-{i}.json"))["per_step"] for i in range(1, repeat + 1)]
    med = lambda k: statistics.median(r[k] for r in runs)
    print(f"| {s} | {med('step_ms'):.1f} | {med('compute_ms'):.1f} | {med('exposed_comm_ms'):.1f} | {med('comm_ms'):.1f} |")
PY
echo
echo "setup: $model, $workers workers on $(nproc) CPUs, --bandwidth $bandwidth, $steps steps, batch 64 per worker, synthetic data, median of $repeat interleaved runs; $(date -u '+%F %T UTC')"
