#!/usr/bin/env bash
# The multi-level data cache behind a slow link (docs/performance.md, "Remote data"): Fashion-MNIST
# shards served by nginx (scripts/data_server.sh) in the root namespace, reached by K emulated
# hosts of scripts/netem through their --rate links; `gradsync train --data-url` with a fresh
# disk cache, one rank per host. Prints, per epoch, the seconds rank 0's training thread spent
# getting batches, the ratio of epoch 1 to the later ones, the cache's counters, and from the
# trace the longest "load batch" wait of the later epochs (the step must not wait on cached data).
# A second run with --cache-memory 0 reads the later epochs from the disk level. Needs root.
#   scripts/bench_data_cache.sh [--build build] [--hosts 2] [--rate 100mbit] [--model cnn]
#       [--epochs 3] [--out results/data-cache]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" hosts=2 rate=100mbit model=cnn epochs=3 out="$repo/results/data-cache"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --hosts) hosts="$2" ;; --rate) rate="$2" ;; --model) model="$2" ;;
    --epochs) epochs="$2" ;; --out) out="$2" ;;
    *) echo "bench_data_cache: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
gradsync="$(cd "$build" && pwd)/apps/gradsync/gradsync"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
[ -f "$out/store/manifest.txt" ] || "$gradsync" shard --output "$out/store"
port=$((20000 + $$ % 20000))
"$repo/scripts/data_server.sh" start --root "$out/store" --port "$port" --work "$out/server" >/dev/null
trap '"$repo/scripts/data_server.sh" stop --work "$out/server"' EXIT
echo "bench_data_cache: $hosts hosts at $rate, $model, $epochs epochs, $(date -u '+%F %T') UTC," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
run() {  # run NAME MEMORY_MIB
  rm -rf "$out/cache-$1"
  "$repo/scripts/netem" --hosts "$hosts" --rate "$rate" run -- bash -c "exec '$gradsync' train \
    --model $model --epochs $epochs --data-url http://\$NETEM_ROOT_ADDR:$port \
    --cache-dir '$out/cache-$1/'\$NETEM_HOST --cache-memory $2 --quiet --metrics '$out/$1.json' \
    --trace '$out/$1-trace.json' --trace-steps 0:100000" > "$out/$1.log" 2>&1 ||
    { tail -20 "$out/$1.log"; exit 1; }
  python3 - "$out" "$1" <<'PY'
import json, sys
out, name = sys.argv[1], sys.argv[2]
m = json.load(open(f"{out}/{name}.json"))
data = [e["data_seconds"] for e in m["epochs"]]
steps = m["summary"]["steps"] // len(data)
later = max(data[1:])
c = m["data_cache"]
print(f"{name}: data per epoch (s) " + " ".join(f"{d:.3f}" for d in data)
      + f"; epoch 1 / slowest later epoch = {data[0] / later:.1f}x; epoch seconds "
      + " ".join(f"{e['seconds']:.1f}" for e in m["epochs"]))
print(f"  rank 0's cache: {c['remote_fetches']} shards from the server ({c['remote_bytes'] / 1e6:.1f} MB"
      f" in {c['remote_seconds']:.2f} s of GETs), {c['disk_hits']} disk hits, {c['memory_hits']} memory reads")
trace = json.load(open(f"{out}/{name}-trace.json"))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
rank0 = [e for e in events if e.get("pid", 0) == 0 and e.get("ph") == "X"]
spans = sorted((e["ts"], e["ts"] + e["dur"], e["args"]["step"]) for e in rank0 if e.get("cat") == "step")
first, rest = [], []
for e in rank0:
    if e.get("name") != "load batch":
        continue
    step = next((s for a, b, s in spans if a <= e["ts"] <= b), None)
    if step is not None:
        (first if step < steps else rest).append(e["dur"] / 1e3)
if rest:
    print(f"  rank 0's 'load batch': epoch 1 max {max(first):.2f} ms, sum {sum(first) / 1e3:.2f} s;"
          f" later epochs max {max(rest):.2f} ms, mean {sum(rest) / len(rest):.3f} ms over {len(rest)} steps")
PY
}
run memory 1024
run disk 0
