#!/usr/bin/env bash
# Wavelet's data-parallel waves against one wave (docs/performance.md, "Wavelet (data parallel)"):
# samples/s and rank 0's peak RSS of one wave at batch B, two waves at B (shared, accumulate) and
# one wave at 2B on the same samples, interleaved per repeat; ranks are processes over TCP with
# an emulated link. Prints a Markdown table (median over the repeats; every run listed after it).
#   scripts/bench_wavelet.sh [--build DIR] [--model cnn] [--workers 4] [--batch 64]
#                            [--bandwidth 100mbit] [--steps 60] [--repeats 3] [--threads 1]
#   scripts/bench_wavelet.sh --accuracy [--build DIR] [--model cnn] [--workers 4] [--batch 64]
#     instead: test accuracy after one epoch (no emulated link, seed 0) of two waves at B (shared,
#     accumulate) and one wave at 2B.
set -euo pipefail
build=build model=cnn workers=4 batch=64 bandwidth=100mbit steps=60 repeats=3 threads=1 accuracy=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --bandwidth) bandwidth=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --accuracy) accuracy=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
gradsync="$build/apps/gradsync/gradsync"
out=$(mktemp -d /tmp/bench_wavelet.XXXXXX)
if [[ $accuracy == 1 ]]; then
  echo "| run | test accuracy % after 1 epoch | train loss | samples/s |"
  echo "|---|---|---|---|"
  for run in "2 waves shared, B=$batch|--waves 2 --wave-consistency shared --batch-size $batch" \
    "2 waves accumulate, B=$batch|--waves 2 --wave-consistency accumulate --batch-size $batch" \
    "1 wave, 2B=$((2 * batch))|--waves 1 --batch-size $((2 * batch))"; do
    IFS='|' read -r name flags <<<"$run"
    # shellcheck disable=SC2086
    "$gradsync" train --model "$model" --workers "$workers" --threads "$threads" --epochs 1 \
      --seed 0 --quiet --metrics "$out/accuracy.json" $flags >/dev/null
    python3 -c "import json; d = json.load(open('$out/accuracy.json')); e = d['epochs'][-1]
print(f\"| $name | {100 * e['test_accuracy']:.2f} | {e['train_loss']:.4f} | {d['summary']['samples_per_s']:.0f} |\")"
  done
  exit 0
fi
# name | flags (the 2B run takes half the steps: the same samples)
configs=(
  "1 wave, B=$batch|--waves 1 --batch-size $batch --steps $steps"
  "2 waves shared, B=$batch|--waves 2 --wave-consistency shared --batch-size $batch --steps $steps"
  "2 waves accumulate, B=$batch|--waves 2 --wave-consistency accumulate --batch-size $batch --steps $steps"
  "1 wave, 2B=$((2 * batch))|--waves 1 --batch-size $((2 * batch)) --steps $((steps / 2))"
)
for ((r = 0; r < repeats; r++)); do
  for i in "${!configs[@]}"; do
    IFS='|' read -r name flags <<<"${configs[$i]}"
    # shellcheck disable=SC2086
    "$gradsync" train --model "$model" --workers "$workers" --bandwidth "$bandwidth" \
      --threads "$threads" --quiet --metrics "$out/c$i-r$r.json" $flags >/dev/null
  done
done
python3 - "$out" "$repeats" "${configs[@]}" <<'PY'
import json, statistics, sys
out, repeats, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| run | samples/s (median) | x 1 wave at B | peak RSS MiB (rank 0: median (min-max)) | runs (samples/s) |")
print("|---|---|---|---|---|")
base = None
for i, c in enumerate(configs):
    name = c.split("|")[0]
    docs = [json.load(open(f"{out}/c{i}-r{r}.json")) for r in range(repeats)]
    rates = [d["summary"]["samples_per_s"] for d in docs]
    rss = [d["summary"]["peak_rss_mib"] for d in docs]
    med = statistics.median(rates)
    base = base or med
    runs = ", ".join(f"{x:.0f}" for x in rates)
    span = f"{statistics.median(rss):.0f} ({min(rss):.0f}-{max(rss):.0f})"
    print(f"| {name} | {med:.0f} | {med / base:.2f} | {span} | {runs} |")
PY
