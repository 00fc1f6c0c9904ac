#!/usr/bin/env bash
# DDP on gradsync's torch.distributed backend against DDP on gloo (issue 43's benchmark): the same
# program (benchmarks/peers/ddp_train.py --backend gloo|gradsync), models, synthetic data, batch
# and threads, interleaved (each repeat runs every system once per model and worker count, in an
# order that rotates), then torch.distributed's all_reduce sweep on both backends
# (benchmarks/peers/dist_allreduce.py). Prints, and writes OUT/dist-backend.md and .json, the
# median samples/s of each system, the median per-repeat ratio of gradsync's to each, and the
# sweep's busbw with the ratio per size.
#
#   scripts/bench_dist_backend.sh [--models "cnn vgg11"] [--workers "2 4"] [--repeats 3]
#       [--steps 40] [--vgg11-steps 15] [--batch-size 64] [--sweep-workers 4]
#       [--build build] [--out results/dist-backend]
#
# Systems: ddp-gloo; ddp-gloo+alloc, gloo with the allocator settings gs.init() applies
# (MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=536870912: docs/performance.md), so
# that the ratio shows the backend and not only the allocator; ddp-gradsync.
set -euo pipefail
command_line="$(printf '%q ' "$0" "$@")"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
models="cnn vgg11" workers_list="2 4" repeats=3 steps=40 vgg11_steps=15 batch_size=64
sweep_workers=4 timeout_s=1800
build="${GRADSYNC_BUILD_DIR:-$repo/build}"
out="$repo/results/dist-backend"
python=/usr/bin/python3
die() { echo "bench_dist_backend: error: $*" >&2; exit 1; }
# shellcheck source=scripts/lib/bench_run.sh
source "$repo/scripts/lib/bench_run.sh"
while [ $# -gt 0 ]; do
  case "$1" in -h | --help) sed -n '2,17s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;; esac
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --models) models="$2" ;; --workers) workers_list="$2" ;; --repeats) repeats="$2" ;;
    --steps) steps="$2" ;; --vgg11-steps) vgg11_steps="$2" ;; --batch-size) batch_size="$2" ;;
    --sweep-workers) sweep_workers="$2" ;; --build) build="$2" ;; --out) out="$2" ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift 2
done
[ -f "$build/python/gradsync/torch/__init__.py" ] || die "no Python package in $build/python (make python)"
mkdir -p "$out/runs"
out="$(cd "$out" && pwd)"
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
host_nproc="$(nproc)"  # before OMP_NUM_THREADS is set: GNU nproc honours it
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
systems=(ddp-gloo ddp-gloo+alloc ddp-gradsync)

run_system() {  # run_system SYSTEM MODEL WORKERS STEPS REPEAT
  local system="$1" model="$2" workers="$3" steps="$4" name="runs/$1-$2-$3-r$5" cmd
  local common=(--workers "$workers" --model "$model" --dataset synthetic --batch-size "$batch_size"
    --steps "$steps" --warmup-steps 3 --threads 1 --quiet --json "$out/$name.json")
  case "$system" in
    ddp-gloo) cmd=("$python" "$repo/benchmarks/peers/ddp_train.py" "${common[@]}") ;;
    ddp-gloo+alloc) cmd=(env MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=536870912
      "$python" "$repo/benchmarks/peers/ddp_train.py" "${common[@]}") ;;
    ddp-gradsync) cmd=("$python" "$repo/benchmarks/peers/ddp_train.py" "${common[@]}"
      --backend gradsync) ;;
  esac
  run "$name" "$out/$name.json" "${cmd[@]}"
}

for ((r = 1; r <= repeats; r++)); do
  for model in $models; do
    model_steps="$steps"
    [ "$model" = vgg11 ] && model_steps="$vgg11_steps"
    for workers in $workers_list; do
      for ((k = 0; k < ${#systems[@]}; k++)); do
        system="${systems[$(((k + r - 1) % ${#systems[@]}))]}"
        run_system "$system" "$model" "$workers" "$model_steps" "$r"
      done
    done
  done
done
for backend in gloo gradsync; do
  run "runs/sweep-$backend" "$out/runs/sweep-$backend.json" "$python" \
    "$repo/benchmarks/peers/dist_allreduce.py" --backend "$backend" --workers "$sweep_workers" \
    --json "$out/runs/sweep-$backend.json"
done

"$python" - "$out" "$command_line" "batch $batch_size per worker, synthetic data, 1 thread per rank, $steps steps ($vgg11_steps for vgg11) after 3 warm-up steps, $repeats interleaved repeats, $host_nproc CPUs; load before $load_before, after $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%F %T UTC'); commit $(git -C "$repo" rev-parse --short HEAD)" <<'EOF'
import json, re, statistics, sys
from collections import defaultdict
from pathlib import Path
out, command, setup = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
runs = defaultdict(lambda: defaultdict(dict))
for path in (out / "runs").glob("ddp-*.json"):
    m = re.match(r"(?P<s>ddp-[a-z+]+)-(?P<m>[a-z0-9]+)-(?P<w>\d+)-r(?P<r>\d+)\.json$", path.name)
    runs[(m["m"], int(m["w"]))][int(m["r"])][m["s"]] = json.loads(path.read_text())["samples_per_s"]
lines = [f"Setup: {setup}.", f"Command: `{command}`", "",
         "| model | workers | ddp-gloo | ddp-gloo+alloc | ddp-gradsync | gradsync / gloo | gradsync / gloo+alloc |",
         "|---|---|---|---|---|---|---|"]
table = {}
for (model, workers), repeats in sorted(runs.items()):
    median = {s: statistics.median(r[s] for r in repeats.values()) for s in ("ddp-gloo", "ddp-gloo+alloc", "ddp-gradsync")}
    ratio = {s: statistics.median(r["ddp-gradsync"] / r[s] for r in repeats.values()) for s in ("ddp-gloo", "ddp-gloo+alloc")}
    table[f"{model}/{workers}"] = {"samples_per_s": median, "ratio": ratio}
    lines.append(f"| {model} | {workers} | {median['ddp-gloo']:.1f} | {median['ddp-gloo+alloc']:.1f} | "
                 f"{median['ddp-gradsync']:.1f} | {ratio['ddp-gloo']:.2f}× | {ratio['ddp-gloo+alloc']:.2f}× |")
sweeps = {b: json.loads((out / "runs" / f"sweep-{b}.json").read_text()) for b in ("gloo", "gradsync")}
lines += ["", f"all_reduce, {sweeps['gloo']['workers']} ranks, float32 SUM (busbw GB/s):", "",
          "| bytes | gloo | gradsync | ratio |", "|---|---|---|---|"]
for g, s in zip(sweeps["gloo"]["rows"], sweeps["gradsync"]["rows"]):
    lines.append(f"| {g['bytes']} | {g['busbw_gbps']:.3f} | {s['busbw_gbps']:.3f} | {s['busbw_gbps'] / g['busbw_gbps']:.2f}× |")
(out / "dist-backend.md").write_text("\n".join(lines) + "\n")
(out / "dist-backend.json").write_text(json.dumps({"ddp": table, "sweeps": sweeps, "setup": setup, "command": command}, indent=2))
print("\n".join(lines))
EOF
