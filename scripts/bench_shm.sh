#!/usr/bin/env bash
# One host, several local ranks: float32 sum-allreduce bus bandwidth of gradsync over shared
# memory (--shm on), gradsync over loopback TCP (--shm off) and Open MPI with its default
# transports (shared memory: vader, CMA), measured as interleaved triples, --repeats times, in
# this one invocation; prints a Markdown table of each system's median busbw per size and
# every gradsync run's ratio to Open MPI, and writes OUT/shm.json. Same method as
# scripts/bench_peers.sh. --algorithms "ring auto" runs gradsync once per allreduce algorithm
# (`gradsync bench allreduce --algorithm`), each over shared memory and over TCP.
# --collective allgather measures allgather the same way (Open MPI's MPI_Allgather; algorithms
# auto, ring, doubling).
#
#   scripts/bench_shm.sh [--workers 4] [--min-bytes 4K] [--max-bytes 256M] [--iters 20]
#                        [--warmup 5] [--repeats 3] [--algorithms auto] [--out results/shm]
#                        [--collective allreduce] [--build build] [--timeout 900]
set -euo pipefail

command_line="$(printf '%q ' "$0" "$@")"
command_line="${command_line% }"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
workers=4 min_bytes=4K max_bytes=256M iters=20 warmup=5 repeats=3 timeout_s=900 algorithms=auto
collective=allreduce
build="${GRADSYNC_BUILD_DIR:-$repo/build}"
out="$repo/results/shm"

die() { echo "bench_shm: error: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) sed -n '2,14s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;; esac
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --workers) workers="$2" ;;
    --min-bytes) min_bytes="$2" ;;
    --max-bytes) max_bytes="$2" ;;
    --iters) iters="$2" ;;
    --warmup) warmup="$2" ;;
    --repeats) repeats="$2" ;;
    --algorithms) algorithms="$2" ;;
    --collective) collective="$2" ;;
    --out) out="$2" ;;
    --build) build="$2" ;;
    --timeout) timeout_s="$2" ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift 2
done
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || die "--repeats must be a positive integer"
[[ "$collective" =~ ^(allreduce|allgather)$ ]] || die "--collective is allreduce or allgather"
gradsync_bin="$build/apps/gradsync/gradsync"
mpi_bin="$build/benchmarks/peers_mpi_allreduce"
[ -x "$gradsync_bin" ] || die "$gradsync_bin not found (ninja -C $build gradsync)"
[ -x "$mpi_bin" ] || die "$mpi_bin not found (ninja -C $build peers_mpi_allreduce)"
mkdir -p "$out"
sweep=(--min-bytes "$min_bytes" --max-bytes "$max_bytes" --iters "$iters" --warmup "$warmup")
# shellcheck source-path=SCRIPTDIR source=lib/bench_run.sh
source "$repo/scripts/lib/bench_run.sh"

for r in $(seq 1 "$repeats"); do
  for algorithm in $algorithms; do
    for shm in on off; do
      name="gradsync-$shm-$algorithm"
      run "$name-$r" "$out/$name-$r.json" "$gradsync_bin" bench "$collective" --workers "$workers" \
        --shm "$shm" --algorithm "$algorithm" --factor 2 "${sweep[@]}" --json "$out/$name-$r.json"
    done
  done
  # Unbound ranks, like gradsync's processes; root and more ranks than cores allowed.
  run "openmpi-$r" "$out/openmpi-$r.json" mpirun --allow-run-as-root --oversubscribe \
    --bind-to none -np "$workers" "$mpi_bin" --collective "$collective" "${sweep[@]}" \
    --json "$out/openmpi-$r.json"
done

/usr/bin/python3 - "$out" "$command_line" "${run_jsons[@]}" <<'EOF'
import json, statistics, sys
out, command, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
busbw = {}  # system -> bytes -> [busbw per repeat]
for path in paths:
    name = path.rsplit("/", 1)[1].rsplit("-", 1)[0]  # gradsync-on-auto, gradsync-off-ring, openmpi
    for row in json.load(open(path))["results"]:
        if row["wrong"]:
            sys.exit(f"{path}: {row['wrong']} wrong results at {row['bytes']} bytes")
        busbw.setdefault(name, {}).setdefault(row["bytes"], []).append(row["busbw_gbps"])
median = {s: {b: statistics.median(v) for b, v in rows.items()} for s, rows in busbw.items()}
json.dump({"command": command, "busbw_gbps": busbw, "median": median},
          open(f"{out}/shm.json", "w"), indent=1)
print(f"`{command}`: median busbw (GB/s) of {len(busbw['openmpi'][min(median['openmpi'])])} "
      "interleaved repeats\n")
systems = sorted(s for s in median if s != "openmpi")
names = [s.replace("gradsync-on", "shm").replace("gradsync-off", "tcp") for s in systems]
print("| size | " + " | ".join(names) + " | Open MPI (shm) | "
      + " | ".join(f"{n} / Open MPI" for n in names) + " |")
print("|---:|" + "---:|" * (2 * len(systems) + 1))
for size in sorted(median["openmpi"]):
    mpi = median["openmpi"][size]
    ours = [median[s][size] for s in systems]
    label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
    print(f"| {label} | " + " | ".join(f"{x:.3f}" for x in ours) + f" | {mpi:.3f} | "
          + " | ".join(f"{x / mpi:.2f}x" for x in ours) + " |")
EOF
