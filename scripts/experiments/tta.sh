#!/usr/bin/env bash
# Experiment (c): time to accuracy on the real Fashion-MNIST. For each configuration, one
# training job of K ranks, one per emulated host (scripts/netem, tc tbf on both directions of
# each host's veth), same model, batch, seed and step budget, evaluating the test set every
# --eval-every steps the same way for PyTorch DDP and gradsync (see report.py / the report's
# setup); the time axis is training time with evaluations left out. Writes OUT/runs/*.json,
# OUT/logs/, OUT/runs.tsv, OUT/setup.json and, through report.py, OUT/tta.{json,md,svg}: test
# accuracy vs training time, time to --target accuracy and the speed-up vs DDP.
#
#   scripts/experiments/tta.sh [--hosts 4] [--rate 100mbit] [--model cnn]
#       [--configs "ddp wfbp fp16 topk:0.01 powersgd:4"] [--steps 468] [--eval-every 20]
#       [--eval-samples 2000] [--target 0.85] [--batch-size 64] [--threads 1] [--short]
#       [--resume] [--data-dir /usr/share/datasets/fashion-mnist] [--build build]
#       [--out results/experiments/tta] [--timeout 3600]
#
# Configuration names as in train.sh (ddp, schedules, sync:S, compressors, a+b). 468 steps =
# 2 epochs at 4 hosts x 64. --short: configs "ddp wfbp topk:0.01", 40 steps, evaluation every
# 10 steps on 1000 images, target 0.65 (a few minutes). Needs root (without it: a message and
# exit 0).
set -euo pipefail
name=tta
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

command_line="$(printf '%q ' "$0" "$@")"
hosts=4 rate=100mbit model=cnn configs="ddp wfbp fp16 topk:0.01 powersgd:4" steps=468
eval_every=20 eval_samples=2000 target=0.85 batch_size=64 threads=1 timeout_s=3600 resume=0
data_dir=/usr/share/datasets/fashion-mnist
build="${GRADSYNC_BUILD_DIR:-$repo/build}"
out="$repo/results/experiments/tta"
usage() { sed -n '2,20s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --short) configs="ddp wfbp topk:0.01" steps=40 eval_every=10 eval_samples=1000 target=0.65
      shift; continue ;;
    --resume) resume=1; shift; continue ;;
  esac
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --hosts) hosts="$2" ;; --rate) rate="$2" ;; --model) model="$2" ;;
    --configs) configs="$2" ;; --steps) steps="$2" ;; --eval-every) eval_every="$2" ;;
    --eval-samples) eval_samples="$2" ;; --target) target="$2" ;;
    --batch-size) batch_size="$2" ;; --threads) threads="$2" ;; --data-dir) data_dir="$2" ;;
    --build) build="$2" ;; --out) out="$2" ;; --timeout) timeout_s="$2" ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift 2
done
for pair in "hosts:$hosts" "steps:$steps" "eval-every:$eval_every" "batch-size:$batch_size" \
  "threads:$threads" "timeout:$timeout_s"; do
  [[ "${pair#*:}" =~ ^[1-9][0-9]*$ ]] || die "--${pair%%:*} must be a positive integer"
done
[[ "$eval_samples" =~ ^[0-9]+$ ]] || die "--eval-samples must be a non-negative integer"
prepare_runs
[ -f "$data_dir/t10k-images-idx3-ubyte.gz" ] || die "Fashion-MNIST not found in $data_dir (apt-get install dataset-fashion-mnist)"

common=(--dataset fashion-mnist --data-dir "$data_dir" --batch-size "$batch_size" --steps "$steps"
  --lr 0.05 --momentum 0.9 --seed 0 --threads "$threads" --eval-every "$eval_every"
  --eval-samples "$eval_samples")
ddp_args=("${common[@]}" --warmup-steps 0)  # Its clock starts at its first step, as gradsync's.
gradsync_args=("${common[@]}")
load_before="$(load_avg)"
date_utc="$(date -u '+%Y-%m-%d %H:%M:%S UTC')"

for config in $configs; do train_once "$model" "$rate" "$config"; done

shaping="$(grep -h -m1 -o 'rate [^ ]* burst [^ ]*' "$out"/logs/*.log | head -1 || true)"
write_setup "$out/setup.json" experiment=tta hosts="$hosts" rate="$rate" model="$model" \
  configs="$configs" steps="$steps" eval_every="$eval_every" eval_samples="$eval_samples" \
  target="$target" batch_size="$batch_size" threads="$threads" dataset=fashion-mnist \
  shaping="$shaping" nproc="$host_nproc" date="$date_utc" commit="$(commit_id)" \
  load_before="$load_before" load_after="$(load_avg)" command="${command_line% }"
"$python" "$report_py" tta --dir "$out"
