#!/usr/bin/env bash
# The --sync strategies side by side under an emulated link: `gradsync train`, the same model,
# workers, seed and steps for each, evaluating the test set every EVAL steps (evaluation time
# excluded from the training time). Prints one Markdown table: throughput, speed-up over the
# baseline (the first strategy), exposed communication, bytes per step, final accuracy and time
# to TARGET accuracy.
#   scripts/bench_strategies.sh [--build build] [--model vgg11] [--workers 4]
#       [--bandwidth 500mbit] [--steps 60] [--eval 20] [--eval-samples 2000] [--target 0.85]
#       [--dataset fashion-mnist] [--warmup 10] [--out results/strategies]
#       [--strategies "ps-ssgd=--sync ssgd --ps;odsgd=--sync odsgd;..."]
# A strategy is LABEL=FLAGS; strategies are separated by ';'. --warmup is passed to the delayed
# strategies as --delay-warmup. Runs whose JSON exists in --out are kept (delete to re-run).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" model=vgg11 workers=4 bandwidth=500mbit steps=60 eval=20 target=0.85
samples=2000 dataset=fashion-mnist warmup=10 out="$repo/results/strategies"
strategies="ps-ssgd=--sync ssgd --ps;ring-ssgd=--sync ssgd;asgd=--sync asgd;ssp:2=--sync ssp:2"
strategies+=";odsgd=--sync odsgd;ssdsgd:5=--sync ssdsgd:5;cdsgd:5=--sync cdsgd:5"
strategies+=";localsgd:4=--sync localsgd:4"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --model) model="$2" ;; --workers) workers="$2" ;;
    --bandwidth) bandwidth="$2" ;; --steps) steps="$2" ;; --eval) eval="$2" ;;
    --eval-samples) samples="$2" ;; --target) target="$2" ;; --dataset) dataset="$2" ;;
    --warmup) warmup="$2" ;; --out) out="$2" ;; --strategies) strategies="$2" ;;
    *) echo "bench_strategies: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$out"
labels=()
IFS=';' read -ra entries <<< "$strategies"
for entry in "${entries[@]}"; do
  label="${entry%%=*}" flags="${entry#*=}"
  labels+=("$label")
  json="$out/${label//[:,=]/_}.json"
  [ -s "$json" ] && { echo "kept $json"; continue; }
  case "$flags" in *odsgd* | *ssdsgd* | *cdsgd*) flags+=" --delay-warmup $warmup" ;; esac
  echo "+ $label: $flags"
  # shellcheck disable=SC2086  # the flags are words
  timeout 3600 "$build/apps/gradsync/gradsync" train --model "$model" --workers "$workers" \
    --dataset "$dataset" --bandwidth "$bandwidth" --steps "$steps" --eval-every "$eval" \
    --eval-samples "$samples" $flags --quiet --metrics "$json.tmp" | tail -1
  mv "$json.tmp" "$json"
done
/usr/bin/python3 - "$out" "$target" "${labels[@]}" <<'PY'
import json, sys
out, target, labels = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
key = lambda label: label.replace(":", "_").replace(",", "_").replace("=", "_")
docs = {label: json.load(open(f"{out}/{key(label)}.json")) for label in labels}
base = docs[labels[0]]["summary"]["samples_per_s"]
print(f"| strategy | samples/s | × {labels[0]} | step (ms) | exposed communication (ms) | MB sent per step | final accuracy | time to {100 * target:.0f}% (s) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for label, doc in docs.items():
    rate, p = doc["summary"]["samples_per_s"], doc["per_step"]
    reached = next((e for e in doc["evaluations"] if e["test_accuracy"] >= target), None)
    tta = f"{reached['seconds']:.0f} (step {reached['step']})" if reached else "not reached"
    print(f"| {label} | {rate:.0f} | {rate / base:.2f} | {p['step_ms']:.0f} | {p['exposed_comm_ms']:.0f} "
          f"| {p['bytes_sent'] / 1e6:.1f} | {100 * doc['summary']['final_test_accuracy']:.2f}% | {tta} |")
PY
echo
echo "setup: $model, $workers workers on $(nproc) CPUs, --bandwidth $bandwidth, $steps steps, batch 64 per worker, $dataset, delayed strategies' warm-up $warmup steps, the first $samples test samples evaluated every $eval steps (all 10,000 at the end); $(date -u '+%F %T UTC')"
