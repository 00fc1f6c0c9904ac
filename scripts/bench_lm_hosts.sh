#!/usr/bin/env bash
# The language model on hosts of several ranks behind a slow network (docs/performance.md,
# "Language model: DiLoCo across hosts"): scripts/netem --hosts H --ranks-per-host N (shared
# memory inside each host, --rate links between), `gradsync train --model gpt` with each --sync
# given, the same batch per rank and steps (so the same tokens). Prints a table of the held-out
# loss, the training time and the bytes host 0's eth0 sent per step (what crossed between hosts).
# Needs root. Raw logs and rank 0's metrics JSON under --out; runs already there are kept.
#   scripts/bench_lm_hosts.sh [--build build] [--hosts 2] [--ranks-per-host 2] [--rate 100mbit]
#       [--steps 600] [--batch 16] [--methods "ssgd diloco:50 diloco:50,group=host"]
#       [--out results/lm-hosts]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" hosts=2 per_host=2 rate=100mbit steps=600 batch=16
methods="ssgd diloco:50 diloco:50,group=host" out="$repo/results/lm-hosts"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --hosts) hosts="$2" ;; --ranks-per-host) per_host="$2" ;;
    --rate) rate="$2" ;; --steps) steps="$2" ;; --batch) batch="$2" ;; --methods) methods="$2" ;;
    --out) out="$2" ;;
    *) echo "bench_lm_hosts: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
gradsync="$(cd "$build" && pwd)/apps/gradsync/gradsync"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
echo "bench_lm_hosts: $hosts hosts x $per_host ranks, $rate, gpt, $steps steps of $batch per rank," \
  "$(date -u '+%F %T') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
for method in $methods; do
  name="$(echo "$method" | tr ':,=' '___')"
  [ -f "$out/$name.json" ] && continue
  echo "\$ gradsync train --model gpt --steps $steps --batch-size $batch --sync $method"
  # Each host's rank 0 reads its eth0 counter around the run: the bytes that left the host.
  "$repo/scripts/netem" --hosts "$hosts" --ranks-per-host "$per_host" --rate "$rate" \
    --timeout 1800 run -- bash -c 'c=/sys/class/net/eth0/statistics/tx_bytes; a=$(cat $c)
      "$0" train --model gpt --steps "$1" --batch-size "$2" --sync "$3" --quiet \
        --metrics "$4.json" || exit $?
      [ "$LOCAL_RANK" = 0 ] && echo "TX_BYTES host=$NETEM_HOST bytes=$(( $(cat $c) - a ))"; true' \
    "$gradsync" "$steps" "$batch" "$method" "$out/$name" > "$out/$name.log" 2>&1 ||
    { tail -5 "$out/$name.log"; exit 1; }
done
python3 - "$out" "$steps" "$methods" <<'PY'
import json, re, sys
out, steps, methods = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
print("\n| --sync | held-out loss (nats/token) | training time (s) | step (ms) | host 0 eth0 bytes per step |")
print("|---|---:|---:|---:|---:|")
for method in methods:
    name = re.sub("[:,=]", "_", method)
    doc = json.load(open(f"{out}/{name}.json"))
    tx = int(re.search(r"TX_BYTES host=0 bytes=(\d+)", open(f"{out}/{name}.log").read()).group(1))
    print(f"| {method} | {doc['summary']['final_held_out_loss']:.4f} | {doc['summary']['seconds']:.1f} "
          f"| {doc['per_step']['step_ms']:.1f} | {tx / steps:,.0f} |")
PY
