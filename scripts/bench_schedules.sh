#!/usr/bin/env bash
# Throughput and exposed communication per strategy under an emulated link: `gradsync train` on
# synthetic data, the same model and steps for every strategy, REPEAT runs each (interleaved),
# medians reported, with each strategy's speed-up over fifo and wfbp, and the physical limit of
# a step, max(compute, communication), both measured by fifo (which does not overlap them).
#   scripts/bench_schedules.sh [--build build] [--model cnn] [--workers 2] [--bandwidth 100mbit]
#       [--steps 30] [--repeat 3] [--json FILE]
#       [--strategies "fifo wfbp fusion:25 p3 sharded"] [--ps-schedule p3:slice=160000]
#       [--compute emulate:PROFILE --compute-scale X]
# A strategy is a --schedule value, "sharded[:OPTIONS]" (--sync, wfbp units; "sharded[:..]@S"
# on --schedule S units),
# localsgd:H, or a parameter-server strategy on --ps-schedule units (P3's slices by default,
# which spread every layer over the servers): "ps-ssgd" (ssgd through co-located servers), asgd,
# ssp:S, and odsgd, ssdsgd:K, cdsgd:K (each after a 1-step warm-up); "ps-ssgd@S" is ps-ssgd on
# --schedule S units. With --compute
# emulate:PROFILE the workers emulate accelerator compute from that model profile (--model and
# the batch are the profile's).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" model=cnn workers=2 bandwidth=100mbit steps=30 repeat=3 json=""
strategies="fifo wfbp fusion:25 p3 sharded" ps_schedule="p3:slice=160000"
compute=real compute_scale=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --model) model="$2" ;; --workers) workers="$2" ;;
    --bandwidth) bandwidth="$2" ;; --steps) steps="$2" ;; --repeat) repeat="$2" ;;
    --strategies | --schedules) strategies="$2" ;; --json) json="$2" ;;
    --ps-schedule) ps_schedule="$2" ;;
    --compute) compute="$2" ;; --compute-scale) compute_scale="$2" ;;
    *) echo "bench_schedules: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
case " $strategies " in *" fifo "*) ;; *) strategies="fifo $strategies" ;; esac  # the baseline
workload=(--model "$model" --dataset synthetic)
described="$model, batch 64 per worker, synthetic data"
if [ "$compute" != real ]; then
  workload=(--compute "$compute" --compute-scale "$compute_scale")
  described="emulated compute ${compute#emulate:} x $compute_scale (the profile's batch)"
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# Local ranks over TCP, where --bandwidth shapes every byte (one run went through unshaped shared
# memory: docs/performance.md, issue 24). The trainer now also makes each rank its own host
# under --bandwidth (docs/cli.md); this keeps the benchmark right whatever that default becomes.
export GRADSYNC_SHM=0
for i in $(seq "$repeat"); do
  for s in $strategies; do
    case "$s" in
      sharded@* | sharded:*@*) flags=(--sync "${s%@*}" --schedule "${s#*@}") ;;
      sharded | sharded:* | localsgd:*) flags=(--sync "$s" --schedule wfbp) ;;
      ps-ssgd) flags=(--sync ssgd --ps --schedule "$ps_schedule") ;;
      ps-ssgd@*) flags=(--sync ssgd --ps --schedule "${s#*@}") ;;
      asgd | ssp:*) flags=(--sync "$s" --schedule "$ps_schedule") ;;
      odsgd | ssdsgd:* | cdsgd:*) flags=(--sync "$s" --delay-warmup 1 --schedule "$ps_schedule") ;;
      *) flags=(--schedule "$s") ;;
    esac
    timeout 1800 "$build/apps/gradsync/gradsync" train "${workload[@]}" --workers "$workers" \
      --steps "$steps" --bandwidth "$bandwidth" "${flags[@]}" --quiet \
      --metrics "$out/${s//[:,=]/_}-$i.json" > /dev/null
  done
done
setup="$described, $workers workers on $(nproc) CPUs, --bandwidth $bandwidth, $steps steps, median of $repeat interleaved runs; load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; $(date -u '+%F %T UTC')"
/usr/bin/python3 - "$out" "$strategies" "$repeat" "$bandwidth" "$json" "$setup" <<'PY'
import json, statistics, sys
out, strategies, repeat, bandwidth, json_path, setup = sys.argv[1:7]
strategies, repeat = strategies.split(), int(repeat)
rows = {}
for s in strategies:
    key = s.replace(":", "_").replace(",", "_").replace("=", "_")
    runs = [json.load(open(f"{out}/{key}-{i}.json")) for i in range(1, int(repeat) + 1)]
    med = lambda k: statistics.median(r["per_step"][k] for r in runs)
    rate = statistics.median(r["summary"]["samples_per_s"] for r in runs)
    # The step time from the throughput (training time / steps): with p3 and sharded a step's
    # communication ends during the next one, so only the whole run's time is exact.
    rows[s] = {"samples_per_s": rate, "step_ms": 1000 * runs[0]["config"]["global_batch"] / rate,
               "compute_ms": med("compute_ms"), "bytes_sent": med("bytes_sent"),
               "exposed_comm_ms": med("exposed_comm_ms"), "comm_ms": med("comm_ms")}
fifo = rows["fifo"]
limit = max(fifo["compute_ms"], fifo["comm_ms"])
print(f"physical limit of a step: max(compute {fifo['compute_ms']:.0f} ms, communication "
      f"{fifo['comm_ms']:.0f} ms) = {limit:.0f} ms (both measured by fifo)")
print()
ratio = lambda r, base: (f"{r['samples_per_s'] / rows[base]['samples_per_s']:.2f}"
                         if base in rows else "-")
print("| strategy | samples/s | × fifo | × wfbp | × ps-ssgd | step (ms) | step / limit | compute (ms) | exposed communication (ms) | communication (ms) | MB sent per step |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for s, r in rows.items():
    print(f"| {s} | {r['samples_per_s']:.0f} | {ratio(r, 'fifo')} | {ratio(r, 'wfbp')} "
          f"| {ratio(r, 'ps-ssgd')} | {r['step_ms']:.0f} | {r['step_ms'] / limit:.2f} "
          f"| {r['compute_ms']:.0f} | {r['exposed_comm_ms']:.0f} | {r['comm_ms']:.0f} "
          f"| {r['bytes_sent'] / 1e6:.1f} |")
if json_path:
    json.dump({"bandwidth": bandwidth, "setup": setup, "limit_ms": limit, "strategies": rows},
              open(json_path, "w"), indent=1)
PY
echo
echo "setup: $setup"
