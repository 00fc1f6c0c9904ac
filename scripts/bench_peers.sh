#!/usr/bin/env bash
# Peers side by side: float32 sum-allreduce bus bandwidth of gradsync, Open MPI and Gloo, measured
# one after the other in this one invocation with the same sweep and method, then merged into
# OUT/peers.json and a Markdown table (OUT/peers.md, also printed) with gradsync's ratios.
#
#   scripts/bench_peers.sh [--workers 4] [--min-bytes 1M] [--max-bytes 64M] [--iters 20]
#                          [--warmup 5] [--out results/peers] [--build build] [--timeout 900]
#                          [--mpi-btl LIST] [--mpi-args "MPIRUN ARGS"]
#
# --build (or GRADSYNC_BUILD_DIR) is the CMake build folder holding apps/gradsync/gradsync and
# benchmarks/peers_{mpi,gloo}_allreduce. Defaults resolve against the repository root; paths given
# on the command line resolve against the current directory. --warmup goes to all three programs.
# --mpi-btl passes
# `--mca pml ob1 --mca btl LIST` to mpirun, e.g. `tcp,self` to make Open MPI use loopback TCP
# like gradsync and Gloo do; by default it uses shared memory between local ranks. --mpi-args adds
# words to mpirun's command line, e.g. "--mca coll_tuned_use_dynamic_rules 1 --mca
# coll_tuned_allreduce_algorithm 4" (ring) instead of Open MPI's choice per size.
# A program missing from the build is skipped with a message; one that fails, reports wrong
# results or runs past --timeout seconds stops the script with a non-zero status.
set -euo pipefail

command_line="$(printf '%q ' "$0" "$@")"
command_line="${command_line% }"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
workers=4 min_bytes=1M max_bytes=64M iters=20 warmup=5 timeout_s=900 mpi_btl="" mpi_args=""
build="${GRADSYNC_BUILD_DIR:-$repo/build}"
out="$repo/results/peers"

usage() { sed -n '2,20s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
die() { echo "bench_peers: error: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in -h | --help) usage; exit 0 ;; esac
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --workers) workers="$2" ;;
    --min-bytes) min_bytes="$2" ;;
    --max-bytes) max_bytes="$2" ;;
    --iters) iters="$2" ;;
    --warmup) warmup="$2" ;;
    --out) out="$2" ;;
    --build) build="$2" ;;
    --timeout) timeout_s="$2" ;;
    --mpi-btl) mpi_btl="$2" ;;
    --mpi-args) mpi_args="$2" ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift 2
done
[[ "$workers" =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer"
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive number of seconds"
[ -d "$build" ] || die "build folder '$build' not found (configure and build, or pass --build)"
mkdir -p "$out"

sweep=(--min-bytes "$min_bytes" --max-bytes "$max_bytes" --iters "$iters")
# shellcheck source-path=SCRIPTDIR source=lib/bench_run.sh
source "$repo/scripts/lib/bench_run.sh"

# skip NAME BINARY TARGET: says why a system is left out of the table.
skip() {
  echo "bench_peers: skipping $1: $2 not found (build it: ninja -C $build $3)" >&2
  echo
}

gradsync_bin="$build/apps/gradsync/gradsync"
if [ -x "$gradsync_bin" ]; then
  run gradsync "$out/gradsync.json" "$gradsync_bin" bench allreduce --workers "$workers" \
    "${sweep[@]}" --warmup "$warmup" --json "$out/gradsync.json"
else
  skip gradsync "$gradsync_bin" gradsync
fi

mpi_bin="$build/benchmarks/peers_mpi_allreduce"
if [ -x "$mpi_bin" ]; then
  mca=()
  [ -n "$mpi_btl" ] && mca=(--mca pml ob1 --mca btl "$mpi_btl")
  read -r -a extra <<<"$mpi_args"  # Split into words, as on a command line (no quoting).
  mca+=("${extra[@]}")
  # Unbound ranks, like gradsync's and Gloo's processes; root and more ranks than cores allowed.
  run openmpi "$out/openmpi.json" mpirun --allow-run-as-root --oversubscribe --bind-to none \
    "${mca[@]}" -np "$workers" "$mpi_bin" "${sweep[@]}" --warmup "$warmup" \
    --json "$out/openmpi.json"
else
  skip openmpi "$mpi_bin" peers_mpi_allreduce
fi

gloo_bin="$build/benchmarks/peers_gloo_allreduce"
if [ -x "$gloo_bin" ]; then
  run gloo "$out/gloo.json" "$gloo_bin" --workers "$workers" "${sweep[@]}" --warmup "$warmup" \
    --json "$out/gloo.json"
else
  skip gloo "$gloo_bin" peers_gloo_allreduce
fi

[ ${#run_jsons[@]} -gt 0 ] || die "nothing was measured"
/usr/bin/python3 "$repo/scripts/peers_table.py" --out "$out/peers.json" --markdown "$out/peers.md" \
  --nproc "$(nproc)" --workers "$workers" --iters "$iters" --warmup "$warmup" \
  --date "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" --command "$command_line" \
  "${run_commands[@]}" "${run_jsons[@]}"
