#!/usr/bin/env bash
# Experiment (b): training throughput vs link bandwidth. For each rate, model and configuration,
# one training job of K ranks, one per emulated host (scripts/netem, tc tbf on both directions
# of each host's veth), on synthetic data with the same per-worker batch and number of steps:
# PyTorch DDP (gloo, benchmarks/peers/ddp_train.py) beside gradsync's schedules, compressors
# and sync strategies. Writes OUT/runs/*.json, OUT/logs/, OUT/runs.tsv, OUT/setup.json and,
# through report.py, OUT/train.{json,md} and OUT/train-MODEL.svg (samples/s vs bandwidth, one
# line per configuration).
#
#   scripts/experiments/train.sh [--hosts 4] [--rates "100mbit 300mbit 1gbit"]
#       [--models "cnn resnet20 vgg11"] [--configs "ddp fifo wfbp ..."] [--steps 40]
#       [--batch-size 64] [--threads 1] [--ddp-warmup-steps 0] [--short] [--resume]
#       [--build build] [--out results/experiments/train] [--timeout 1800]
#
# Configurations: ddp (PyTorch DDP); fifo, wfbp, fusion:MB, p3 (gradsync --schedule, dense);
# sync:S (gradsync --sync S, e.g. sync:sharded, sync:localsgd:4); any other name is a gradsync
# --compress spec (schedule wfbp); "a+b" combines. --short: cnn, rates "100mbit 1gbit", configs
# "ddp wfbp topk:0.01", 20 steps (a few minutes: the `make bench` version). --resume keeps
# the runs already in OUT/runs.tsv with status ok (a long grid can be continued). A run that
# fails or times out (--timeout per run) is recorded as such and the grid goes on.
# Needs root (without it: a message and exit 0).
set -euo pipefail
name=train
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

command_line="$(printf '%q ' "$0" "$@")"
hosts=4 rates="100mbit 300mbit 1gbit" models="cnn resnet20 vgg11" steps=40 batch_size=64
threads=1 ddp_warmup=0 timeout_s=1800 resume=0
configs="ddp fifo wfbp fusion:25 p3 fp16 topk:0.01 mstopk:0.01 gtopk:0.01 randomk:0.01 dgc:0.01"
configs+=" qsgd:16 terngrad onebit signsgd powersgd:4 gradiveq:4 sync:sharded sync:localsgd:4"
build="${GRADSYNC_BUILD_DIR:-$repo/build}"
out="$repo/results/experiments/train"
usage() { sed -n '2,22s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --short) models=cnn rates="100mbit 1gbit" configs="ddp wfbp topk:0.01" steps=20
      shift; continue ;;
    --resume) resume=1; shift; continue ;;
  esac
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --hosts) hosts="$2" ;; --rates) rates="$2" ;; --models) models="$2" ;;
    --configs) configs="$2" ;; --steps) steps="$2" ;; --batch-size) batch_size="$2" ;;
    --threads) threads="$2" ;; --ddp-warmup-steps) ddp_warmup="$2" ;; --build) build="$2" ;;
    --out) out="$2" ;; --timeout) timeout_s="$2" ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift 2
done
for pair in "hosts:$hosts" "steps:$steps" "batch-size:$batch_size" "threads:$threads" \
  "timeout:$timeout_s"; do
  [[ "${pair#*:}" =~ ^[1-9][0-9]*$ ]] || die "--${pair%%:*} must be a positive integer"
done
[[ "$ddp_warmup" =~ ^[0-9]+$ ]] || die "--ddp-warmup-steps must be a non-negative integer"
prepare_runs

common=(--dataset synthetic --batch-size "$batch_size" --steps "$steps" --lr 0.05 --momentum 0.9
  --seed 0 --threads "$threads")
ddp_args=("${common[@]}" --warmup-steps "$ddp_warmup")
gradsync_args=("${common[@]}")
load_before="$(load_avg)"
date_utc="$(date -u '+%Y-%m-%d %H:%M:%S UTC')"

for model in $models; do
  for rate in $rates; do
    for config in $configs; do train_once "$model" "$rate" "$config"; done
  done
done

shaping="$(grep -h -o 'rate [^ ]* burst [^ ]*' "$out"/logs/*.log | sort -u | paste -sd, | sed 's/,/, /g' || true)"
write_setup "$out/setup.json" experiment=train hosts="$hosts" rates="$rates" models="$models" \
  configs="$configs" steps="$steps" batch_size="$batch_size" threads="$threads" \
  ddp_warmup_steps="$ddp_warmup" dataset=synthetic shaping="$shaping" \
  nproc="$host_nproc" date="$date_utc" commit="$(commit_id)" load_before="$load_before" \
  load_after="$(load_avg)" command="${command_line% }"
"$python" "$report_py" train --dir "$out"
