#!/usr/bin/env bash
# All three emulated-cluster experiments, then one report: OUT/report.md with the plots linked.
#   (a) allreduce.sh  allreduce bus bandwidth vs size, gradsync / Open MPI / Gloo
#   (b) train.sh      training throughput vs link bandwidth, PyTorch DDP / gradsync configurations
#   (c) tta.sh        time to accuracy on Fashion-MNIST, PyTorch DDP / gradsync configurations
#
#   scripts/experiments/run_all.sh [--short] [--only "allreduce train tta"] [--out DIR]
#                                  [--build build]
#
# Full (default OUT results/experiments): each runner's defaults; the (b) grid (3 models x 3
# rates x 19 configurations) takes many hours on 2 cores: run it on a quiet machine, or narrow
# it with TRAIN_ARGS. --short (default OUT results/experiments-short; the `make bench` version,
# a few minutes): (a) 4 hosts at 1gbit, 1M..16M, 5 iterations; (b) and (c) their --short modes.
# Extra words for each runner: ALLREDUCE_ARGS, TRAIN_ARGS, TTA_ARGS (e.g. TRAIN_ARGS="--models
# vgg11 --resume"). Needs root for the emulated hosts: without it, a message and exit 0.
set -euo pipefail
name=run_all
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

short=0 only="allreduce train tta" out="" build="${GRADSYNC_BUILD_DIR:-$repo/build}"
usage() { sed -n '2,15s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --short) short=1; shift; continue ;;
  esac
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --only) only="$2" ;; --out) out="$2" ;; --build) build="$2" ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift 2
done
skip_unless_root
if [ -z "$out" ]; then
  out="$repo/results/experiments"
  [ "$short" -eq 1 ] && out="$repo/results/experiments-short"
fi
mkdir -p "$out"
read -r -a allreduce_args <<<"${ALLREDUCE_ARGS:-}"
read -r -a train_args <<<"${TRAIN_ARGS:-}"
read -r -a tta_args <<<"${TTA_ARGS:-}"
mode=()
if [ "$short" -eq 1 ]; then
  allreduce_args=(--max-bytes 16M --iters 5 --warmup 2 "${allreduce_args[@]}")
  mode=(--short)
fi
here="$repo/scripts/experiments"
status=0
for experiment in $only; do
  echo "=== ($experiment) $(date -u '+%H:%M:%S UTC')"
  case "$experiment" in
    allreduce) "$here/allreduce.sh" --build "$build" --out "$out/allreduce" "${allreduce_args[@]}" || status=1 ;;
    train) "$here/train.sh" --build "$build" --out "$out/train" "${mode[@]}" "${train_args[@]}" || status=1 ;;
    tta) "$here/tta.sh" --build "$build" --out "$out/tta" "${mode[@]}" "${tta_args[@]}" || status=1 ;;
    *) die "unknown experiment '$experiment' (allreduce, train, tta)" ;;
  esac
done
"$python" "$report_py" report --root "$out"
exit "$status"
