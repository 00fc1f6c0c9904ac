#!/usr/bin/env bash
# The emulated-accelerator benchmarks of docs/performance.md ("Emulated accelerator compute"),
# one table per run of scripts/bench_schedules.sh, 4 workers on this host with the in-transport
# link limiter, and the simulator's predictions of the same configurations
# (scripts/validate_simulator.py --compute). About 90 minutes on 2 cores; VGG-19 needs about
# 14 GB of memory (4 workers x parameters, gradient slots, gradient pool and velocity); with
# co-located parameter servers more than 21 GiB (p3paper's VGG-19 half was killed for memory
# twice on a 24 GB host, docs/performance.md; vgg19's ps strategies are likely the same).
#   scripts/bench_emulated.sh [--build build] [--out results/emulated] [--only NAME...]
# NAME: resnet50 | resnet50-ps | vgg19 | p3paper | validate (default: all, in that order).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$repo/build" out="$repo/results/emulated" only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --only) shift; while [ $# -gt 0 ] && [[ "$1" != --* ]]; do only+=("$1"); shift; done ;;
    *) echo "bench_emulated: unknown option $1" >&2; exit 2 ;;
  esac
done
[ ${#only[@]} -gt 0 ] || only=(resnet50 resnet50-ps vgg19 p3paper validate)
mkdir -p "$out"
schedules() { "$repo/scripts/bench_schedules.sh" --build "$build" --workers 4 "$@"; }

for name in "${only[@]}"; do
  case "$name" in
    resnet50)  # scheduling where communication ~ compute (fifo: 1.3-1.7 s against 1.07 s)
      schedules --compute emulate:resnet50 --compute-scale 10 --bandwidth 1gbit --steps 10 \
        --repeat 2 --strategies "fifo wfbp p3 p3:concurrent=0 sharded sharded:concurrent=1 \
ps-ssgd odsgd ssdsgd:5" --json "$out/resnet50-1gbit.json" | tee "$out/resnet50-1gbit.md" ;;
    resnet50-ps)  # the parameter servers move more bytes: their communication ~ compute here
      schedules --compute emulate:resnet50 --compute-scale 10 --bandwidth 1500mbit --steps 10 \
        --repeat 2 --strategies "wfbp ps-ssgd odsgd ssdsgd:5" \
        --json "$out/resnet50-ps-1500mbit.json" | tee "$out/resnet50-ps-1500mbit.md" ;;
    vgg19)
      schedules --compute emulate:vgg19 --compute-scale 50 --bandwidth 1gbit --steps 6 \
        --repeat 1 --strategies "fifo wfbp p3 sharded sharded:fc=auto ps-ssgd odsgd ssdsgd:5" \
        --json "$out/vgg19-1gbit.json" | tee "$out/vgg19-1gbit.md" ;;
    p3paper)  # P3's setting: P4000 = V100 x 2.96, made 10x slower here, links 10x slower too
      schedules --compute emulate:resnet50 --compute-scale 29.6 --bandwidth 400mbit --steps 6 \
        --repeat 1 --strategies "ps-ssgd@wfbp ps-ssgd@p3:slice=1000000 ps-ssgd@p3:slice=50000" \
        --json "$out/p3paper-resnet50.json" | tee "$out/p3paper-resnet50.md"
      schedules --compute emulate:vgg19 --compute-scale 29.6 --bandwidth 1500mbit --steps 5 \
        --repeat 1 --strategies "ps-ssgd@wfbp ps-ssgd@p3:slice=1000000 ps-ssgd@p3:slice=50000" \
        --json "$out/p3paper-vgg19.json" | tee "$out/p3paper-vgg19.md" ;;
    validate)
      "$repo/scripts/validate_simulator.py" --build "$build" --workers 4 \
        --compute emulate:resnet50 --compute-scale 10 --short 3 --long 11 \
        --out "$out/validation-resnet50" --configs "fifo@1gbit wfbp@1gbit p3@1gbit \
wfbp+sync:sharded@1gbit wfbp+sync:sharded:fc=auto@1gbit p3:slice=160000+ps@1gbit \
p3:slice=160000+sync:odsgd@1500mbit p3:slice=160000+sync:ssdsgd:5@1500mbit wfbp@400mbit \
p3@400mbit" | tee "$out/validation-resnet50.md"
      "$repo/scripts/validate_simulator.py" --build "$build" --workers 4 \
        --compute emulate:vgg19 --compute-scale 50 --short 2 --long 6 \
        --out "$out/validation-vgg19" --configs "fifo@1gbit wfbp@1gbit p3@1gbit \
wfbp+sync:sharded@1gbit wfbp+sync:sharded:fc=auto@1gbit" | tee "$out/validation-vgg19.md" ;;
    *) echo "bench_emulated: unknown benchmark $name" >&2; exit 2 ;;
  esac
done
