#!/usr/bin/env bash
# Experiment (a): allreduce bus bandwidth vs message size of gradsync, Open MPI and Gloo on K
# emulated hosts (scripts/netem: one network namespace per host, both directions of each host's
# veth shaped with tc tbf to --rate), one rank per host, one system after the other in this one
# invocation with the same sweep and method (peer_bench.h: float32 sum in place, sizes doubling,
# --warmup untimed then --iters timed iterations, time = slowest rank's mean,
# busbw = 2(n-1)/n x bytes / time). Writes OUT/{gradsync,openmpi,gloo}.json, OUT/logs/,
# OUT/setup.json and, through report.py, OUT/allreduce.{json,md,svg}.
#
#   scripts/experiments/allreduce.sh [--hosts 4] [--rate 1gbit] [--min-bytes 1M]
#       [--max-bytes 64M] [--iters 20] [--warmup 5] [--systems "gradsync openmpi openmpi-ring gloo"]
#       [--mpi-args "MPIRUN ARGS"] [--build build] [--out results/experiments/allreduce]
#       [--timeout 900]
#
# Open MPI runs through `scripts/netem mpirun` (btl tcp,self on the shaped links, plus --mpi-args):
# "openmpi" with its own choice of algorithm per size, "openmpi-ring" forced to its ring
# (--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4), the algorithm
# gradsync and Gloo use. gradsync and Gloo run one process per host
# through `scripts/netem run` (Gloo: benchmarks/peers/gloo_allreduce.cc as RANK of WORLD_SIZE, its
# FileStore in a fresh directory under OUT). Needs root (without it: a message and exit 0).
# A system whose binary is missing is skipped with a message; one that fails stops the script.
set -euo pipefail
name=allreduce
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

command_line="$(printf '%q ' "$0" "$@")"
hosts=4 rate=1gbit min_bytes=1M max_bytes=64M iters=20 warmup=5 timeout_s=900 mpi_args=""
systems="gradsync openmpi openmpi-ring gloo"
ring=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4)
build="${GRADSYNC_BUILD_DIR:-$repo/build}"
out="$repo/results/experiments/allreduce"
usage() { sed -n '2,22s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) usage; exit 0 ;; esac
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --hosts) hosts="$2" ;; --rate) rate="$2" ;; --min-bytes) min_bytes="$2" ;;
    --max-bytes) max_bytes="$2" ;; --iters) iters="$2" ;; --warmup) warmup="$2" ;;
    --systems) systems="$2" ;; --mpi-args) mpi_args="$2" ;; --build) build="$2" ;;
    --out) out="$2" ;; --timeout) timeout_s="$2" ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift 2
done
[[ "$hosts" =~ ^[1-9][0-9]*$ ]] || die "--hosts must be a positive integer"
[[ "$timeout_s" =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive number of seconds"
skip_unless_root
mkdir -p "$out/logs"
out="$(cd "$out" && pwd)"  # Absolute: the ranks run elsewhere.
rm -f "$out"/{gradsync,openmpi,openmpi-ring,gloo}.json "$out"/allreduce.{json,md,svg}

net=("$netem" --hosts "$hosts" --rate "$rate" --timeout "$timeout_s")
sweep=(--min-bytes "$min_bytes" --max-bytes "$max_bytes" --iters "$iters" --warmup "$warmup")
load_before="$(load_avg)"
date_utc="$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
inputs=()

for system in $systems; do
  json="$out/$system.json"
  case "$system" in
    gradsync)
      bin="$build/apps/gradsync/gradsync" target=gradsync
      cmd=("${net[@]}" run -- "$bin" bench allreduce "${sweep[@]}" --json "$json") ;;
    openmpi | openmpi-ring)
      bin="$build/benchmarks/peers_mpi_allreduce" target=peers_mpi_allreduce
      read -r -a extra <<<"$mpi_args"  # Split into words, as on a command line.
      [ "$system" = openmpi-ring ] && extra+=("${ring[@]}")
      cmd=("${net[@]}" mpirun "${extra[@]}" -- "$bin" "${sweep[@]}" --workers "$hosts" --json "$json") ;;
    gloo)
      bin="$build/benchmarks/peers_gloo_allreduce" target=peers_gloo_allreduce
      store="$out/gloo-store"
      rm -rf "$store" && mkdir -p "$store"  # Fresh: a stale store would pair ranks of two runs.
      cmd=("${net[@]}" run -- "$bin" --store-dir "$store" "${sweep[@]}" --json "$json") ;;
    *) die "unknown system '$system' (gradsync, openmpi, openmpi-ring, gloo)" ;;
  esac
  if [ ! -x "$bin" ]; then
    echo "$name: skipping $system: $bin not found (build it: ninja -C $build $target)" >&2
    continue
  fi
  echo "== $system: $hosts hosts at $rate"
  xrun "$out/logs/$system.log" "${cmd[@]}" || die "$system failed (log: $out/logs/$system.log)"
  rm -rf "${store:-}"
  grep -E '^(\[h0\] )? +[0-9]+ ' "$out/logs/$system.log" | sed 's/^\[h0\] //' || true
  [ -s "$json" ] || die "$system exited 0 but wrote no $json"
  inputs+=(--input "$system=$json")
done
[ ${#inputs[@]} -gt 0 ] || die "nothing was measured"

shaping="$(grep -h -m1 -o 'rate [^ ]* burst [^ ]*' "$out"/logs/*.log | head -1 || true)"
write_setup "$out/setup.json" experiment=allreduce hosts="$hosts" rate="$rate" shaping="$shaping" \
  min_bytes="$min_bytes" max_bytes="$max_bytes" iters="$iters" warmup="$warmup" \
  mpi_args="$mpi_args" nproc="$host_nproc" date="$date_utc" commit="$(commit_id)" \
  load_before="$load_before" load_after="$(load_avg)" command="${command_line% }"
"$python" "$report_py" allreduce --dir "$out" "${inputs[@]}"
