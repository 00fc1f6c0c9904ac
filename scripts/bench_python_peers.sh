#!/usr/bin/env bash
# Training throughput of gradsync's Python package (benchmarks/python/gs_train.py:
# gs.DistributedOptimizer) beside PyTorch DDP (benchmarks/peers/ddp_train.py, gloo) and the C++
# CLI (`gradsync train`), on the same models, synthetic data, batch and threads, interleaved:
# each repeat runs every system once per model and worker count, in an order that rotates from
# one repeat to the next, so that a change of the machine's load falls on all of them alike.
# Prints (and writes OUT/python-peers.md, .json) the median samples/s of each and the medians of
# the per-repeat ratios.
#
#   scripts/bench_python_peers.sh [--models "cnn vgg11"] [--workers "2 4"] [--repeats 3]
#       [--steps 40] [--vgg11-steps 15] [--batch-size 64] [--threads 1] [--schedule wfbp]
#       [--compression none] [--build build] [--out results/python-peers] [--timeout 1800]
#
# Systems: gradsync-python; pytorch-ddp; pytorch-ddp+alloc, DDP with the allocator settings
# gs.init() and `gradsync train` apply (MALLOC_MMAP_THRESHOLD_=33554432
# MALLOC_TRIM_THRESHOLD_=536870912: docs/performance.md); gradsync-cli. Every system times every
# step (no warm-up steps: the CLI has none to leave out) between two barriers, with
# OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=--threads.
set -euo pipefail
command_line="$(printf '%q ' "$0" "$@")"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models="cnn vgg11" workers_list="2 4" repeats=3 steps=40 vgg11_steps=15 batch_size=64 threads=1
schedule=wfbp compression=none timeout_s=1800
build="${GRADSYNC_BUILD_DIR:-$repo/build}"
out="$repo/results/python-peers"
python=/usr/bin/python3  # the interpreter with torch
die() { echo "bench_python_peers: error: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) sed -n '2,21s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;; esac
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --models) models="$2" ;; --workers) workers_list="$2" ;; --repeats) repeats="$2" ;;
    --steps) steps="$2" ;; --vgg11-steps) vgg11_steps="$2" ;; --batch-size) batch_size="$2" ;;
    --threads) threads="$2" ;; --schedule) schedule="$2" ;; --compression) compression="$2" ;;
    --build) build="$2" ;; --out) out="$2" ;; --timeout) timeout_s="$2" ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift 2
done
gradsync_bin="$build/apps/gradsync/gradsync"
[ -x "$gradsync_bin" ] || die "$gradsync_bin not found (cmake --build $build --target gradsync)"
[ -f "$build/python/gradsync/torch/__init__.py" ] || die "no Python package in $build/python (make python)"
mkdir -p "$out/runs"
out="$(cd "$out" && pwd)"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
host_nproc="$(nproc)"  # before OMP_NUM_THREADS is set: GNU nproc honours it
export OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
systems=(gradsync-python pytorch-ddp pytorch-ddp+alloc gradsync-cli)

# run_system SYSTEM MODEL WORKERS STEPS JSON: one run, its output in JSON's .log.
run_system() {
  local system="$1" model="$2" workers="$3" steps="$4" json="$5"
  local common=(--workers "$workers" --model "$model" --dataset synthetic --batch-size "$batch_size"
    --steps "$steps" --lr 0.05 --momentum 0.9 --seed 0 --threads "$threads")
  local cmd
  case "$system" in
    gradsync-python) cmd=("$python" "$repo/benchmarks/python/gs_train.py" "${common[@]}"
      --warmup-steps 0 --schedule "$schedule" --compression "$compression" --quiet --json "$json") ;;
    pytorch-ddp) cmd=("$python" "$repo/benchmarks/peers/ddp_train.py" "${common[@]}"
      --warmup-steps 0 --quiet --json "$json") ;;
    pytorch-ddp+alloc) cmd=(env MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=536870912
      "$python" "$repo/benchmarks/peers/ddp_train.py" "${common[@]}" --warmup-steps 0 --quiet
      --json "$json") ;;
    gradsync-cli) cmd=("$gradsync_bin" train "${common[@]}" --schedule "$schedule"
      --compress "$compression" --compress-warmup 0 --quiet --metrics "$json") ;;
  esac
  echo "+ ${cmd[*]}" >"$json.log"
  rm -f "$json"
  timeout --kill-after=10 "$timeout_s" "${cmd[@]}" >>"$json.log" 2>&1 || die "$system $model $workers failed (log: $json.log)"
  [ -s "$json" ] || die "$system $model $workers wrote no $json"
  tail -1 "$json.log"
}

for ((r = 1; r <= repeats; r++)); do
  for model in $models; do
    model_steps="$steps"
    [ "$model" = vgg11 ] && model_steps="$vgg11_steps"
    for workers in $workers_list; do
      for ((k = 0; k < ${#systems[@]}; k++)); do  # rotated order
        system="${systems[$(((k + r - 1) % ${#systems[@]}))]}"
        run_system "$system" "$model" "$workers" "$model_steps" \
          "$out/runs/$system-$model-$workers-r$r.json"
      done
    done
  done
done

"$python" "$repo/scripts/python_peers_table.py" --dir "$out/runs" --out "$out/python-peers.json" \
  --markdown "$out/python-peers.md" --setup "batch $batch_size per worker, synthetic data, $threads thread(s) per rank, $steps steps ($vgg11_steps for vgg11), schedule $schedule, compression $compression, $repeats interleaved repeats, $host_nproc CPUs shared with other work; load before $load_before, after $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%F %T UTC'); commit $(git -C "$repo" rev-parse --short HEAD)" \
  --command "$command_line"
