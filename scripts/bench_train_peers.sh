#!/usr/bin/env bash
# Training throughput side by side: `gradsync train` and PyTorch DDP (gloo) on the same models,
# data, worker count and per-worker batch, one after the other in this one invocation, merged
# into OUT/train-peers.json and a Markdown table (OUT/train-peers.md, also printed) with
# gradsync's samples/s ratio to DDP per model.
#
#   scripts/bench_train_peers.sh [--workers 2] [--models "mlp cnn vgg11"] [--batch-size 64]
#                                [--steps 60] [--warmup-steps 10] [--threads 1]
#                                [--dataset synthetic] [--data-dir DIR] [--build build]
#                                [--out results/train-peers] [--timeout 900]
#
# Per model M: (a) BUILD/apps/gradsync/gradsync train ... --metrics OUT/gradsync-M.json --quiet,
# (b) /usr/bin/python3 benchmarks/peers/ddp_train.py ... --json OUT/ddp-M.json, each under
# `timeout` (--timeout seconds) with OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=--threads; both get --lr 0.05
# --momentum 0.9 --seed 0. --batch-size is per worker.
# DDP times --steps steps after --warmup-steps untimed ones; gradsync gets --threads and
# --warmup-steps only if `gradsync train --help` lists them (the table header says which).
# --build (or GRADSYNC_BUILD_DIR) and --out default to the repository's build/ and
# results/train-peers; paths given on the command line resolve against the current directory.
# gradsync is skipped with a message if the binary or its `train` subcommand is missing; a run
# that fails, writes no JSON or outlasts --timeout stops the script with a non-zero status.
set -euo pipefail

command_line="$(printf '%q ' "$0" "$@")"
command_line="${command_line% }"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
workers=2 models="mlp cnn vgg11" batch_size=64 steps=60 warmup_steps=10 threads=1
dataset=synthetic data_dir="" timeout_s=900
build="${GRADSYNC_BUILD_DIR:-$repo/build}"
out="$repo/results/train-peers"
python=/usr/bin/python3  # The only interpreter with torch (docs: environment.md).

usage() { sed -n '2,22s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
die() { echo "bench_train_peers: error: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in -h | --help) usage; exit 0 ;; esac
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --workers) workers="$2" ;;
    --models) models="$2" ;;
    --batch-size) batch_size="$2" ;;
    --steps) steps="$2" ;;
    --warmup-steps) warmup_steps="$2" ;;
    --threads) threads="$2" ;;
    --dataset) dataset="$2" ;;
    --data-dir) data_dir="$2" ;;
    --build) build="$2" ;;
    --out) out="$2" ;;
    --timeout) timeout_s="$2" ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift 2
done
for pair in "workers:$workers" "batch-size:$batch_size" "steps:$steps" "threads:$threads" \
  "timeout:$timeout_s"; do
  [[ "${pair#*:}" =~ ^[1-9][0-9]*$ ]] || die "--${pair%%:*} must be a positive integer"
done
[[ "$warmup_steps" =~ ^[0-9]+$ ]] || die "--warmup-steps must be a non-negative integer"
case "$dataset" in
  synthetic | fashion-mnist) ;;
  *) die "--dataset must be synthetic or fashion-mnist" ;;
esac
read -r -a model_list <<<"$models"
[ ${#model_list[@]} -gt 0 ] || die "--models is empty"
for model in "${model_list[@]}"; do
  case "$model" in mlp | cnn | resnet20 | vgg11) ;; *) die "unknown model '$model'" ;; esac
done
[ -x "$python" ] || die "$python not found (PyTorch DDP needs the system python3-torch)"
mkdir -p "$out"
host_nproc="$(nproc)"  # Before OMP_NUM_THREADS is set: GNU nproc honours it.
# OpenBLAS (Debian's BLAS under both LibTorch and python3-torch) has its own pthread pool that
# torch.set_num_threads does not reach: bound it for both systems alike.
export OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"
load_before="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"

data_args=()
[ -n "$data_dir" ] && data_args=(--data-dir "$data_dir")
# Same optimizer settings for both, spelled out rather than left to each one's defaults.
common=(--workers "$workers" --dataset "$dataset" "${data_args[@]}" --batch-size "$batch_size"
  --steps "$steps" --lr 0.05 --momentum 0.9 --seed 0)

table_args=()  # --gradsync/--ddp MODEL JSON for train_table.py.
# shellcheck source-path=SCRIPTDIR source=lib/bench_run.sh
source "$repo/scripts/lib/bench_run.sh"

gradsync_bin="$build/apps/gradsync/gradsync"
gradsync_extra=()
gradsync_ok=0
top_help=""
[ -x "$gradsync_bin" ] && top_help="$(timeout 60 "$gradsync_bin" --help 2>&1 || true)"
if [ ! -x "$gradsync_bin" ]; then
  echo "bench_train_peers: skipping gradsync: $gradsync_bin not found" \
    "(build it: cmake --build $build --target gradsync)" >&2
elif ! grep -Eq '^[[:space:]]+train([[:space:]]|$)' <<<"$top_help"; then
  # `gradsync train --help` is no test: an unknown subcommand after --help still exits 0.
  echo "bench_train_peers: skipping gradsync: $gradsync_bin has no train command yet" >&2
elif ! help_text="$(timeout 60 "$gradsync_bin" train --help 2>&1)"; then
  echo "bench_train_peers: skipping gradsync: '$gradsync_bin train --help' failed:" >&2
  printf '%s\n' "$help_text" | head -5 >&2
else
  gradsync_ok=1
  # Options outside the stable CLI contract, passed only where this build has them.
  if grep -Eq -- '(^|[[:space:],])--threads\b' <<<"$help_text"; then
    gradsync_extra+=(--threads "$threads")
  fi
  if grep -Eq -- '(^|[[:space:],])--warmup-steps\b' <<<"$help_text"; then
    gradsync_extra+=(--warmup-steps "$warmup_steps")
  fi
fi

measured=0
for model in "${model_list[@]}"; do
  if [ "$gradsync_ok" -eq 1 ]; then
    json="$out/gradsync-$model.json"
    run "gradsync-$model" "$json" "$gradsync_bin" train --model "$model" "${common[@]}" \
      "${gradsync_extra[@]}" --metrics "$json" --quiet
    table_args+=(--gradsync "$model" "$json")
    measured=$((measured + 1))
  fi
  json="$out/ddp-$model.json"
  run "ddp-$model" "$json" "$python" "$repo/benchmarks/peers/ddp_train.py" --model "$model" \
    "${common[@]}" --warmup-steps "$warmup_steps" --threads "$threads" --json "$json" --quiet
  table_args+=(--ddp "$model" "$json")
  measured=$((measured + 1))
done
[ "$measured" -gt 0 ] || die "nothing was measured"

"$python" "$repo/scripts/train_table.py" --out "$out/train-peers.json" \
  --markdown "$out/train-peers.md" --nproc "$host_nproc" --workers "$workers" \
  --batch-size "$batch_size" --steps "$steps" --warmup-steps "$warmup_steps" \
  --threads "$threads" --dataset "$dataset" --load "$load_before" \
  --load-after "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')" \
  --date "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" --command "$command_line" "${run_commands[@]}" "${table_args[@]}"
