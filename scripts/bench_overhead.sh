#!/usr/bin/env bash
# Overhead of `gradsync train --workers 1` over a plain LibTorch loop (same model, data, batch,
# thread count), alternating the two REPEAT times and comparing medians. Both run pinned to one
# core (taskset -c 0), so neither can borrow the second core through a stray thread pool, and the
# rank runs in this process (RANK=0 WORLD_SIZE=1) like the plain loop, without the launcher.
#   scripts/bench_overhead.sh [--build build] [--models "mlp cnn"] [--steps 200] [--repeat 3]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" models="mlp cnn" steps=200 repeat=3
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --models) models="$2" ;; --steps) steps="$2" ;; --repeat) repeat="$2" ;;
    *) echo "bench_overhead: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| model | plain LibTorch samples/s | gradsync --workers 1 samples/s | overhead |"
echo "|---|---:|---:|---:|"
for model in $models; do
  plain=() ours=()
  for _ in $(seq "$repeat"); do
    plain+=("$(timeout 600 taskset -c 0 "$build/benchmarks/plain_libtorch_train" --model "$model" --steps "$steps" |
      sed -E 's/.* ([0-9.]+) samples\/s$/\1/')")
    ours+=("$(RANK=0 WORLD_SIZE=1 timeout 600 taskset -c 0 "$build/apps/gradsync/gradsync" train --model "$model" \
      --dataset synthetic --steps "$steps" --quiet | sed -E 's/.*, ([0-9.]+) samples\/s.*/\1/')")
  done
  p=$(printf '%s\n' "${plain[@]}" | median)
  o=$(printf '%s\n' "${ours[@]}" | median)
  awk -v m="$model" -v p="$p" -v o="$o" \
    'BEGIN { printf "| %s | %.0f | %.0f | %+.1f%% |\n", m, p, o, (p / o - 1) * 100 }'
done
echo
echo "setup: pinned to 1 of $(nproc) CPUs, $steps steps, batch 64, 1 thread, synthetic data, median of $repeat alternating runs; $(date -u '+%F %T UTC')"
