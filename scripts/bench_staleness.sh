#!/usr/bin/env bash
# Staleness compensation on the servers across seeds: one epoch of cnn on Fashion-MNIST with 4
# workers as threads (`--transport loopback`, the setting in which asgd and ssp:2 diverged: one
# worker can be descheduled while the others run ahead), the same seed, data and steps for ring
# ssgd (the reference), and for asgd and ssp:2 without and with compensation: a configuration
# SYNC+COMP runs `--sync SYNC --compensate COMP` (asgd+sc, ssp:2+lwp, asgd+sc+lwp). Prints a
# Markdown table: per configuration, the runs, how many diverged (below 20%), mean / min / max
# final test accuracy and the mean gap to ring ssgd of the same seed; every run's figures in
# OUT/runs.tsv. Runs whose JSON exists in OUT are kept (delete to re-run). --transport tcp runs
# the 4 workers as processes over loopback TCP instead.
#   scripts/bench_staleness.sh [--build build] [--seeds "0 1 2 3 4 5 6 7 8 9"]
#       [--configs "ssgd asgd asgd+sc ssp:2 ssp:2+sc"] [--steps 234] [--transport loopback]
#       [--out results/staleness]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" seeds="0 1 2 3 4 5 6 7 8 9" configs="ssgd asgd asgd+sc ssp:2 ssp:2+sc"
steps=234 out="$repo/results/staleness" transport=loopback
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2" ;; --seeds) seeds="$2" ;; --configs) configs="$2" ;;
    --steps) steps="$2" ;; --out) out="$2" ;; --transport) transport="$2" ;;
    *) echo "bench_staleness: unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
gradsync="$build/apps/gradsync/gradsync"
[ -x "$gradsync" ] || { echo "bench_staleness: no $gradsync (make build)" >&2; exit 2; }
mkdir -p "$out"
for seed in $seeds; do
  for config in $configs; do
    json="$out/${config//[:+]/_}-seed$seed.json"
    [ -s "$json" ] && continue
    flags=(--sync "${config%%+*}")
    [ "${config%%+*}" != "$config" ] && flags+=(--compensate "${config#*+}")
    echo "+ seed $seed: $config ($(date -u +%H:%M:%S))"
    "$gradsync" train --model cnn --dataset fashion-mnist --transport "$transport" --workers 4 \
      --steps "$steps" --seed "$seed" "${flags[@]}" --quiet --metrics "$json" \
      >"$out/${config//[:+]/_}-seed$seed.log" 2>&1 || echo "  failed: see $out/*seed$seed.log"
  done
done
python3 - "$out" "$seeds" "$configs" <<'PY'
import json, os, statistics, sys
out, seeds, configs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def accuracy(config, seed):
    path = os.path.join(out, f"{config.replace(':', '_').replace('+', '_')}-seed{seed}.json")
    if not os.path.exists(path):
        return None
    return json.load(open(path))["summary"]["final_test_accuracy"]
with open(os.path.join(out, "runs.tsv"), "w") as tsv:
    for config in configs:
        for seed in seeds:
            tsv.write(f"{config}\t{seed}\t{accuracy(config, seed)}\n")
print("| configuration | runs | diverged (< 20%) | mean accuracy | min-max | mean gap to ssgd |")
print("|---|---:|---:|---:|---:|---:|")
for config in configs:
    runs = [(s, accuracy(config, s)) for s in seeds if accuracy(config, s) is not None]
    if not runs:
        continue
    accs = [a for _, a in runs]
    gaps = [100 * (accuracy("ssgd", s) - a) for s, a in runs if accuracy("ssgd", s) is not None]
    gap = f"{statistics.mean(gaps):.2f}" if gaps and config != "ssgd" else "-"
    print(f"| {config} | {len(runs)} | {sum(a < 0.2 for a in accs)} | "
          f"{100 * statistics.mean(accs):.2f}% | {100 * min(accs):.2f}-{100 * max(accs):.2f}% | "
          f"{gap} |")
PY
