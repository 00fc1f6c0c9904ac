#!/usr/bin/env bash
# Compression with its defaults only (docs/performance.md, "Compression with no options"): each
# method as `--compress METHOD` and nothing else (its default density, levels or rank, the
# default dense warm-up `--compress-warmup auto`, error feedback as the method defaults, the
# guard on) trains the cnn on Fashion-MNIST for one epoch (2 workers, global batch 128, 468
# steps), beside dense SSGD; prints each final accuracy, its gap to dense, the dense steps it
# began with and what the guard did. Real CPU training. With GRADSYNC_LOG_LEVEL=debug in the
# environment the logs hold every guard window's signals (the loss ratio's largest is printed).
#   scripts/bench_defaults.sh [--build build] [--seed 0] [--methods "fp16 topk ..."]
#       [--out results/defaults]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" seed=0 out="$repo/results/defaults"
methods="fp16 topk mstopk gtopk randomk dgc qsgd terngrad onebit signsgd powersgd gradiveq"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --seed) seed="$2" ;; --methods) methods="$2" ;; --out) out="$2" ;;
    *) echo "bench_defaults: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$out"
echo "bench_defaults: seed $seed, $(date -u '+%F %T') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
for method in none $methods; do
  [ -f "$out/$method-$seed.json" ] ||
    "$build/apps/gradsync/gradsync" train --model cnn --workers 2 --steps 468 --seed "$seed" \
      --compress "$method" --quiet --metrics "$out/$method-$seed.json" > "$out/$method-$seed.log" 2>&1
done
python3 - "$out" "$seed" $methods <<'PY'
import json, re, sys
out, seed, methods = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(m):
    return json.load(open(f"{out}/{m}-{seed}.json"))
dense = load("none")["summary"]["final_test_accuracy"]
def largest_loss_ratio(m):
    ratios = [float(x) for x in re.findall(r"loss ([0-9.]+|nan|inf)x the dense warm-up",
                                           open(f"{out}/{m}-{seed}.log").read())]
    return f"{max(ratios):.2f}" if ratios else "-"
print(f"| method (defaults only) | accuracy | gap to dense ({100 * dense:.2f}%) | within 1.5 "
      "| dense warm-up | largest loss ratio | guard |")
print("|---|---:|---:|---|---:|---:|---|")
for m in methods:
    r = load(m)
    acc = r["summary"]["final_test_accuracy"]
    guard = "; ".join(f"unit {g['unit']} dense at step {g['step']} ({g['signal']})" for g in r["guard"]) or "idle"
    gap = 100 * (dense - acc)
    warmup = r["summary"].get("compress_warmup_steps", 0)
    print(f"| {m} | {100 * acc:.2f}% | {gap:.2f} | {'yes' if gap <= 1.5 else '**no**'} | {warmup} "
          f"| {largest_loss_ratio(m)} | {guard} |")
PY
