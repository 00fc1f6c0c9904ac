#!/usr/bin/env bash
# gradsync tune against a sweep of real runs (docs/performance.md, "gradsync tune against
# measured time to accuracy"): for each setup, tune ranks its candidates, then runs every shown
# row (each compressor x strategy's best schedule, and the recommendation) for --steps steps of
# `gradsync train` and re-ranks them by measured step time x the same convergence factor.
#   vgg11:    a profile measured here (`gradsync profile --model vgg11 --workers 4`), 4 workers,
#             500 Mbit/s, verified by real CPU training of vgg11 (--verify-model vgg11)
#   resnet50: the built-in V100 profile x 10 (--compute-scale 10), 4 workers, 1 Gbit/s,
#             verified with emulated compute
#   scripts/bench_tune.sh [--build build] [--steps 10] [--setups "vgg11 resnet50"]
#       [--out results/tune]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" steps=10 setups="vgg11 resnet50" out="$repo/results/tune"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --steps) steps="$2" ;; --setups) setups="$2" ;; --out) out="$2" ;;
    *) echo "bench_tune: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
gradsync="$build/apps/gradsync/gradsync"
mkdir -p "$out"
rows=64  # every compressor x strategy pair tune shows
for setup in $setups; do
  echo "bench_tune: $setup, $steps steps per run, $(date -u '+%F %T') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
  case "$setup" in
    vgg11)
      [ -f "$out/vgg11-profile.json" ] ||
        "$gradsync" profile --model vgg11 --workers 4 --steps 10 --warmup 2 \
          --output "$out/vgg11-profile.json" > "$out/vgg11-profile.log"
      args=(--model-profile "$out/vgg11-profile.json" --workers 4 --bandwidth 500mbit
            --verify-model vgg11) ;;
    resnet50)
      args=(--model-profile resnet50 --compute-scale 10 --workers 4 --bandwidth 1gbit) ;;
    *) echo "bench_tune: unknown setup $setup (vgg11, resnet50)" >&2; exit 2 ;;
  esac
  "$gradsync" tune "${args[@]}" --top "$rows" --verify "$steps" --verify-top "$rows" \
    --json "$out/$setup.json" | tee "$out/$setup.txt"
  echo "bench_tune: $setup done $(date -u '+%F %T') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
