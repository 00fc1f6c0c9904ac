#!/usr/bin/env bash
# Pipelined backpropagation against fill-drain on the single-process emulator
# (`gradsync train --pipeline S --pipeline-emulate`, real CPU training on Fashion-MNIST): for each
# seed, one fill-drain run (consistent SGD: its arithmetic does not depend on S) and, for each S,
# pb without compensation, with SC, with LWP and with both. Every run trains the same samples in
# the same order from the same initialisation, with the batch-REF recipe (--lr, --momentum)
# scaled to --batch-size (--reference-batch). Prints one Markdown table: final test accuracy on
# the whole test set and the run's mean training loss, per seed and their mean.
#   scripts/bench_pipeline.sh [--build build] [--model cnn-gn] [--stages "4 8"] [--steps 500]
#       [--batch-size 8] [--reference-batch 128] [--lr 0.05] [--momentum 0.9] [--seeds "0"]
#       [--out results/pipeline]
# Runs whose JSON exists in --out are kept (delete to re-run).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" model=cnn-gn stages="4 8" steps=500 batch=8 reference=128 lr=0.05
momentum=0.9 seeds="0" out="$repo/results/pipeline"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --model) model="$2" ;; --stages) stages="$2" ;;
    --steps) steps="$2" ;; --batch-size) batch="$2" ;; --reference-batch) reference="$2" ;;
    --lr) lr="$2" ;; --momentum) momentum="$2" ;; --seeds) seeds="$2" ;; --out) out="$2" ;;
    *) echo "bench_pipeline: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$out"
run() {  # run LABEL SEED FLAGS...
  local label="$1" seed="$2"
  shift 2
  local json="$out/${label}_seed${seed}.json"
  [ -s "$json" ] && { echo "kept $json"; return; }
  echo "+ $label seed $seed: $*"
  "$build/apps/gradsync/gradsync" train --model "$model" --steps "$steps" --batch-size "$batch" \
    --reference-batch "$reference" --lr "$lr" --momentum "$momentum" --seed "$seed" --quiet \
    --pipeline-emulate --metrics "$json.part" "$@"
  mv "$json.part" "$json"
}
for seed in $seeds; do
  first="${stages%% *}"
  run fill-drain "$seed" --pipeline "$first" --pipeline-mode fill-drain
  for s in $stages; do
    for compensate in none sc lwp sc+lwp; do
      run "pb-S${s}-${compensate/+/-}" "$seed" --pipeline "$s" --compensate "$compensate"
    done
  done
done
python3 - "$out" "$stages" "$seeds" <<'EOF'
import json, os, statistics, sys
out, stages, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def row(label, mode, s, compensate):
    docs = [json.load(open(os.path.join(out, f"{label}_seed{seed}.json"))) for seed in seeds]
    acc = [100 * d["summary"]["final_test_accuracy"] for d in docs]
    loss = [d["epochs"][-1]["train_loss"] for d in docs]
    cells = " / ".join(f"{a:.2f}" for a in acc)
    print(f"| {mode} | {s} | {compensate} | {cells} | {statistics.mean(acc):.2f} | "
          f"{statistics.mean(loss):.4f} |")
print("| mode | S | compensation | test accuracy % per seed | mean | mean training loss |")
print("|---|---|---|---|---|---|")
row("fill-drain", "fill-drain", "any", "-")
for s in stages:
    for c in ["none", "sc", "lwp", "sc+lwp"]:
        row(f"pb-S{s}-{c.replace('+', '-')}", "pb", s, c)
EOF
