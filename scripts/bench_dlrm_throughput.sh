#!/bin/bash
# DLRM throughput: embeddings on 2 servers (sparse rows) against the dense-gradient path (tables
# replicated on the workers, their full gradients averaged over the ring), 4 worker processes over
# TCP on this host, interleaved pairs (docs/performance.md, "Partial recovery (CPR)").
#   scripts/bench_dlrm_throughput.sh [--build build] [--repeats 3] [--steps 60] [--rows 100000]
set -euo pipefail
build=build repeats=3 steps=60 rows=100000
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
bin="$build/apps/gradsync/gradsync"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
common=(train --model dlrm --workers 4 --steps "$steps" --batch-size 128 --embedding-rows "$rows"
        --lr 0.1 --momentum 0 --eval-samples 2048 --quiet)
echo "| repeat | path | samples/s | push bytes/step | touched row bytes/step | ring bytes/step |"
echo "|---:|---|---:|---:|---:|---:|"
for r in $(seq "$repeats"); do
  for servers in 2 0; do
    "$bin" "${common[@]}" --servers "$servers" --metrics "$out/m.json" > /dev/null
    python3 - "$out/m.json" "$r" "$servers" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
p, s = m["per_step"], m["summary"]
path = "2 embedding servers (sparse rows)" if sys.argv[3] == "2" else "dense gradients (replicated tables)"
print(f"| {sys.argv[2]} | {path} | {s['samples_per_s']:.0f} | {p['push_bytes']:.0f} | "
      f"{p['touched_row_bytes']:.0f} | {p['ring_bytes']:.0f} |")
EOF
  done
done
