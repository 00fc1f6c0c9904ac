#!/usr/bin/env bash
# The compression guardrail's cost per step (docs/performance.md, "The compression guardrail's
# overhead"): the same run with --guard on and --guard off, in interleaved pairs (on, off, on,
# off, ...) so that the machine's load drifts over both alike; prints each run's step time and
# the median of on/off - 1 over the pairs. The method must be one the guard leaves compressed
# (topk:0.01 by default), so both runs do the same exchanges and only the guard's norms and its
# agreement every 10 steps differ.
#   scripts/bench_guard.sh [--build build] [--workers 2] [--model cnn] [--compress topk:0.01]
#       [--steps 200] [--pairs 5] [--out results/guard]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" workers=2 model=cnn compress=topk:0.01 steps=200 pairs=5
out="$repo/results/guard"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --workers) workers="$2" ;; --model) model="$2" ;;
    --compress) compress="$2" ;; --steps) steps="$2" ;; --pairs) pairs="$2" ;; --out) out="$2" ;;
    *) echo "bench_guard: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$out"
run() {  # run NAME on|off
  "$build/apps/gradsync/gradsync" train --workers "$workers" --model "$model" \
    --compress "$compress" --compress-warmup 0 --steps "$steps" --guard "$2" --quiet \
    --metrics "$out/$1.json" > "$out/$1.log" 2>&1
}
echo "bench_guard: $workers workers, $model, $compress, $steps steps, $pairs pairs," \
  "$(date -u '+%F %T') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$pairs"); do
  run "on-$i" on
  run "off-$i" off
done
python3 - "$out" "$pairs" <<'PY'
import json, statistics, sys
out, pairs = sys.argv[1], int(sys.argv[2])
ratios = []
for i in range(1, pairs + 1):
    on = json.load(open(f"{out}/on-{i}.json"))
    off = json.load(open(f"{out}/off-{i}.json"))
    assert not off["guard"], "guard off acted"
    if on["guard"]:
        sys.exit(f"the guard acted on pair {i}: {on['guard'][0]['reason']}; pick another method")
    a, b = on["per_step"]["step_ms"], off["per_step"]["step_ms"]
    ratios.append(a / b - 1)
    print(f"pair {i}: guard on {a:.2f} ms/step, off {b:.2f} ms/step, on/off - 1 = {100 * (a / b - 1):+.2f}%")
print(f"median over {pairs} pairs: {100 * statistics.median(ratios):+.2f}% "
      f"(min {100 * min(ratios):+.2f}%, max {100 * max(ratios):+.2f}%)")
PY
