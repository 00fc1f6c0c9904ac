#!/usr/bin/env bash
# --schedule auto against a sweep of fixed p3 slices (docs/performance.md, "Online schedule
# tuning"): emulated accelerator compute over worker processes whose links are shaped, one run
# per fixed slice (window 2) and one auto run; prints each fixed slice's step, auto's trials and
# choice, and the chosen slice's fixed step against the best fixed step.
#   scripts/bench_schedule_auto.sh [--build build] [--workers 4] [--compute emulate:resnet50]
#       [--compute-scale 10] [--bandwidth 1gbit] [--latency 0] [--steps 15] [--auto-steps 50]
#       [--out results/schedule-auto]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" workers=4 compute=emulate:resnet50 scale=10 bandwidth=1gbit latency=0
steps=15 auto_steps=50 out="$repo/results/schedule-auto"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --workers) workers="$2" ;; --compute) compute="$2" ;;
    --compute-scale) scale="$2" ;; --bandwidth) bandwidth="$2" ;; --latency) latency="$2" ;;
    --steps) steps="$2" ;; --auto-steps) auto_steps="$2" ;; --out) out="$2" ;;
    *) echo "bench_schedule_auto: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$out"
run() {  # run NAME SCHEDULE STEPS
  "$build/apps/gradsync/gradsync" train --workers "$workers" --compute "$compute" \
    --compute-scale "$scale" --bandwidth "$bandwidth" --latency "$latency" --schedule "$2" \
    --steps "$3" --quiet --metrics "$out/$1.json" > "$out/$1.log" 2>&1
}
echo "bench_schedule_auto: $workers workers, $compute x $scale, $bandwidth, latency $latency," \
  "$(date -u '+%F %T') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
for slice in 10000 40000 160000 640000 2560000; do run "p3-$slice" "p3:slice=$slice" "$steps"; done
run auto auto "$auto_steps"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
fixed = {}
for slice in (10000, 40000, 160000, 640000, 2560000):
    doc = json.load(open(f"{out}/p3-{slice}.json"))
    fixed[f"p3:slice={slice},window=2"] = doc["per_step"]["step_ms"]
best = min(fixed, key=fixed.get)
for spec, ms in fixed.items():
    print(f"  fixed {spec:28s} {ms:8.1f} ms per step{'  (best)' if spec == best else ''}")
auto = json.load(open(f"{out}/auto.json"))["summary"]
chosen = auto["schedule"]
print(f"  auto: {auto['schedule_tuning']}")
if chosen in fixed:
    print(f"  auto chose {chosen}: its fixed step is {fixed[chosen] / fixed[best]:.3f} x the best")
else:
    print(f"  auto chose {chosen} (window other than 2: no fixed run of it here)")
PY
