#!/usr/bin/env bash
# Hosts of several ranks behind a slow network (docs/performance.md, "Hosts of several ranks"):
# scripts/netem --hosts 2 --ranks-per-host 2 (shared memory inside each host, --rate links
# between), for every rate given:
#  1. dense allreduce, flat ring against hierarchical (`gradsync bench allreduce --algorithm`),
#     time per size, same run;
#  2. training steps of --model on real Fashion-MNIST: dense (the engine picks hierarchical or
#     ring by its cost model), flat topk:R and hitopk:R; the steady-state step time and the bytes
#     host 0's eth0 sent (the veth counters) per step, both as the difference between a run of
#     --steps and one of 3 steps, so that what every run does once (start-up, parameter
#     broadcast, the final evaluation) cancels out.
# Needs root. Prints a table per rate; raw logs and JSON under --out.
#   scripts/bench_hierarchy.sh [--build build] [--rates "1gbit 100mbit"] [--model vgg11]
#       [--steps 15] [--density 0.01] [--max-bytes 16M] [--out results/hierarchy]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" rates="1gbit 100mbit" model=vgg11 steps=15 density=0.01 max_bytes=16M
out="$repo/results/hierarchy"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --rates) rates="$2" ;; --model) model="$2" ;; --steps) steps="$2" ;;
    --density) density="$2" ;; --max-bytes) max_bytes="$2" ;; --out) out="$2" ;;
    *) echo "bench_hierarchy: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
gradsync="$(cd "$build" && pwd)/apps/gradsync/gradsync"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
netem() { "$repo/scripts/netem" --hosts 2 --ranks-per-host 2 --rate "$1" --timeout 900 run -- "${@:2}"; }
echo "bench_hierarchy: 2 hosts x 2 ranks, rates $rates, $model, $(date -u '+%F %T') UTC," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
for rate in $rates; do
  for algorithm in ring hierarchical; do
    netem "$rate" "$gradsync" bench allreduce --algorithm "$algorithm" --min-bytes 64K \
      --max-bytes "$max_bytes" --factor 4 --iters 5 --warmup 1 --timeout 300s \
      --json "$out/allreduce-$rate-$algorithm.json" > "$out/allreduce-$rate-$algorithm.log" 2>&1
  done
  for compress in none "topk:$density" "hitopk:$density"; do
    for n in 3 "$steps"; do
      name="train-$rate-${compress%%:*}-$n"
      # Each host's rank 0 reads its eth0 counter around the run: the bytes that left the host.
      netem "$rate" bash -c 'c=/sys/class/net/eth0/statistics/tx_bytes; a=$(cat $c)
        "$0" train --model "$1" --steps "$2" --compress "$3" --compress-warmup 0 --quiet --metrics "$4.json" || exit $?
        [ "$LOCAL_RANK" = 0 ] && echo "TX_BYTES host=$NETEM_HOST bytes=$(( $(cat $c) - a ))"; true' \
        "$gradsync" "$model" "$n" "$compress" "$out/$name" > "$out/$name.log" 2>&1 ||
        { tail -5 "$out/$name.log"; exit 1; }
    done
  done
  python3 - "$out" "$rate" "$steps" "$density" <<'PY'
import json, re, sys
out, rate, steps, density = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
ring = json.load(open(f"{out}/allreduce-{rate}-ring.json"))["results"]
hier = json.load(open(f"{out}/allreduce-{rate}-hierarchical.json"))["results"]
print(f"\n## {rate} between hosts: dense allreduce (time per call, ms)")
print("| bytes | flat ring | hierarchical | ring / hierarchical |\n|---:|---:|---:|---:|")
for r, h in zip(ring, hier):
    print(f"| {r['bytes']} | {r['time_us'] / 1e3:.1f} | {h['time_us'] / 1e3:.1f} | {r['time_us'] / h['time_us']:.2f} |")
print(f"\n## {rate} between hosts: training, steady state (steps 4-{steps})")
print("| config | step ms | × dense | host 0 eth0 bytes per step |\n|---|---:|---:|---:|")
rows = {}
def tx(name, n):
    log = open(f"{out}/train-{rate}-{name}-{n}.log").read()
    return int(re.search(r"TX_BYTES host=0 bytes=(\d+)", log).group(1))
def total_ms(name, n):  # rank 0's training time of the run
    return json.load(open(f"{out}/train-{rate}-{name}-{n}.json"))["per_step"]["step_ms"] * n
for name in ("none", "topk", "hitopk"):
    step = (total_ms(name, steps) - total_ms(name, 3)) / (steps - 3)
    rows[name] = (step, (tx(name, steps) - tx(name, 3)) / (steps - 3))
for name, (mean, tx) in rows.items():
    label = "dense" if name == "none" else f"{name}:{density}"
    print(f"| {label} | {mean:.0f} | {rows['none'][0] / mean:.2f} | {tx / 1e6:.2f} MB |")
print(f"hitopk / flat topk inter-host bytes: {rows['hitopk'][1] / rows['topk'][1]:.3f}")
PY
done
