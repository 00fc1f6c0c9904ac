#!/usr/bin/env bash
# Time-to-accuracy of every compression method under an emulated link: `gradsync train` on the
# real Fashion-MNIST, the same model, workers, seed and step budget for each method, evaluating
# the test set every EVAL steps (evaluation time excluded from the training time). Prints a
# Markdown table: time to TARGET accuracy, final accuracy, throughput, bytes per step.
#   scripts/bench_compress_tta.sh [--build build] [--model vgg11] [--workers 4]
#       [--bandwidth 100mbit] [--steps 200] [--eval 20] [--eval-samples 2000] [--target 0.85]
#       [--out results/tta]
#       [--methods "none fp16 topk:0.01 ..."]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" model=vgg11 workers=4 bandwidth=100mbit steps=200 eval=20 target=0.85
samples=2000  # test samples per --eval-every evaluation (the run's last one uses all 10,000)
out="$repo/results/tta"
methods="none mstopk:0.01 topk:0.01 gtopk:0.01 randomk:0.01 dgc:0.01 fp16 qsgd:16 terngrad onebit signsgd powersgd:4 gradiveq:4"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --model) model="$2" ;; --workers) workers="$2" ;;
    --bandwidth) bandwidth="$2" ;; --steps) steps="$2" ;; --eval) eval="$2" ;;
    --target) target="$2" ;; --out) out="$2" ;; --methods) methods="$2" ;;
    --eval-samples) samples="$2" ;;
    *) echo "bench_compress_tta: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$out"
for m in $methods; do
  json="$out/${m//[:,=]/_}.json"
  [ -s "$json" ] && { echo "kept $json (delete it to re-run)"; continue; }
  echo "+ $m"
  timeout 3600 "$build/apps/gradsync/gradsync" train --model "$model" --workers "$workers" \
    --bandwidth "$bandwidth" --steps "$steps" --eval-every "$eval" --eval-samples "$samples" --compress "$m" --compress-warmup 0 --quiet \
    --metrics "$json.tmp" | tail -1
  mv "$json.tmp" "$json"
done
/usr/bin/python3 "$repo/scripts/tta_table.py" --target "$target" $(for m in $methods; do echo "$out/${m//[:,=]/_}.json"; done)
echo
echo "setup: $model, $workers workers on $(nproc) CPUs, --bandwidth $bandwidth, $steps steps, batch 64 per worker, Fashion-MNIST, the first $samples test samples evaluated every $eval steps (all 10,000 at the end); $(date -u '+%F %T UTC')"
