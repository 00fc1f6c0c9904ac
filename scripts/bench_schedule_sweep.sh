#!/usr/bin/env bash
# Throughput vs link bandwidth for every strategy (the analogue of the P3 paper's figures):
# scripts/bench_schedules.sh at each bandwidth, one JSON per bandwidth under OUT, then
# scripts/plot_sweep.py draws OUT/throughput_vs_bandwidth.svg and OUT/speedup_vs_bandwidth.svg
# and prints the table.
#   scripts/bench_schedule_sweep.sh [--build build] [--model vgg11] [--workers 4] [--steps 10]
#       [--repeat 1] [--bandwidths "50mbit 100mbit 200mbit 500mbit 1gbit 2gbit"]
#       [--strategies "fifo wfbp fusion:25 p3 sharded"] [--out results/sweep]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" model=vgg11 workers=4 steps=10 repeat=1 out="$repo/results/sweep"
bandwidths="50mbit 100mbit 200mbit 500mbit 1gbit 2gbit"
strategies="fifo wfbp fusion:25 p3 sharded"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --model) model="$2" ;; --workers) workers="$2" ;;
    --steps) steps="$2" ;; --repeat) repeat="$2" ;; --bandwidths) bandwidths="$2" ;;
    --strategies) strategies="$2" ;; --out) out="$2" ;;
    *) echo "bench_schedule_sweep: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$out"
for b in $bandwidths; do
  json="$out/$model-$workers-$b.json"
  [ -s "$json" ] && { echo "kept $json (delete it to re-run)"; continue; }
  echo "+ $b"
  "$repo/scripts/bench_schedules.sh" --build "$build" --model "$model" --workers "$workers" \
    --bandwidth "$b" --steps "$steps" --repeat "$repeat" --strategies "$strategies" --json "$json"
done
/usr/bin/python3 "$repo/scripts/plot_sweep.py" --svg "$out/throughput_vs_bandwidth.svg" \
  --speedup-svg "$out/speedup_vs_bandwidth.svg" \
  --title "$model, $workers workers on $(nproc) CPUs, $steps steps per point" \
  $(for b in $bandwidths; do echo "$out/$model-$workers-$b.json"; done)
