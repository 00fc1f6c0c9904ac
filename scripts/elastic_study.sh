#!/bin/bash
# Elastic training study (docs/performance.md, "Elastic training"): for each seed, an unfailed
# run of `gradsync train --elastic 3:4` (4 workers under `gradsync launch`), the same run with
# worker 2 SIGKILLed after KILL_AT of its steps (no restart: it ends with 3), and with a restart
# (--max-restarts 1: it ends with 4). Prints, per run, the final test accuracy, its gap to the
# unfailed run, the rounds (workers@first step), the times from the kill to its detection, to
# the survivors' first step in their new round (detection, rendezvous, mesh, state) and to the
# restarted worker's first step, and checks that every sample was used once per epoch
# (--record-samples).
#
#   scripts/elastic_study.sh [SEEDS] [KILL_AT] [extra train flags...]
#   scripts/elastic_study.sh "0 1 2 3" 120 --epochs 1
#
# GRADSYNC (default build/apps/gradsync/gradsync) and OUT (default /tmp/gradsync-elastic-study).
set -euo pipefail

SEEDS=${1:-"0 1 2"}
KILL_AT=${2:-120}
shift $(($# < 2 ? $# : 2))
GRADSYNC=${GRADSYNC:-build/apps/gradsync/gradsync}
OUT=${OUT:-/tmp/gradsync-elastic-study}
mkdir -p "$OUT"

# run DIR SEED RESTARTS KILL(0: none) [flags]: one job; prints "kill_time" when it killed.
run() {
  local dir=$1 seed=$2 restarts=$3 kill=$4
  shift 4
  rm -rf "$dir" && mkdir -p "$dir"
  GRADSYNC_LOG_LEVEL=info "$GRADSYNC" launch -n 4 --elastic --max-restarts "$restarts" -- \
    "$GRADSYNC" train --elastic 3:4 --model mlp --seed "$seed" --quiet \
    --record-samples "$dir/samples" --metrics "$dir/metrics.json" "$@" \
    >"$dir/out" 2>"$dir/err" &
  local job=$!
  if [ "$kill" -gt 0 ]; then
    local file="$dir/samples/worker-2-0.txt"
    until [ -f "$file" ] && [ "$(wc -l <"$file")" -gt "$kill" ]; do sleep 0.02; done
    local pid
    pid=$(sed -n 's/.*pid \([0-9]*\).*/\1/p' "$file" | head -1)
    date +%H:%M:%S.%N >"$dir/kill_time"
    kill -9 "$pid"
  fi
  wait "$job"
}

report() {
  PYTHONPATH="$(dirname "$0")" python3 - "$@" <<'PY'
import json, os, re, sys
from datetime import datetime
from chaos import SampleWatcher, committed_steps, samples_once  # scripts/chaos.py
base, dirs = sys.argv[1], sys.argv[2:]
unfailed = json.load(open(f"{base}/metrics.json"))["summary"]["final_test_accuracy"]
def seconds(text):
    t = datetime.strptime(text[:15], "%H:%M:%S.%f")
    return t.hour * 3600 + t.minute * 60 + t.second + t.microsecond / 1e6
for d in [base] + dirs:
    m = json.load(open(f"{d}/metrics.json"))
    rounds = m["elastic"]["rounds"]
    acc = m["summary"]["final_test_accuracy"]
    # every sample of every epoch once, each step by every rank of its round
    watcher = SampleWatcher(f"{d}/samples")
    watcher.poll(0)
    once, samples = samples_once(committed_steps(m), watcher)
    recovery = ""
    if os.path.exists(f"{d}/kill_time"):
        killed = seconds(open(f"{d}/kill_time").read())
        err = open(f"{d}/err").read()
        noticed = re.findall(r"(\d\d:\d\d:\d\d\.\d+) WARN pid \d+: worker \d+: elastic round 0 lost", err)
        ready = re.findall(r"(\d\d:\d\d:\d\d\.\d+) INFO pid \d+: elastic round 1: ", err)
        joined = re.findall(r"(\d\d:\d\d:\d\d\.\d+) INFO pid \d+: elastic round 2: 4 ", err)
        if noticed and ready:
            recovery = (f"  kill -> noticed {seconds(noticed[0]) - killed:.3f} s,"
                        f" -> round 1 trains {seconds(ready[0]) - killed:.2f} s")
        if joined:
            recovery += f", -> restarted worker trains {seconds(joined[0]) - killed:.2f} s"
    shape = " ".join(f"{x['workers']}@{x['first_step']}" for x in rounds)
    print(f"{os.path.basename(d):14} acc {100*acc:6.2f}%  gap {100*(acc-unfailed):+5.2f}  "
          f"rounds {shape}  samples once: {once} ({samples}){recovery}")
PY
}

for seed in $SEEDS; do
  run "$OUT/s$seed-unfailed" "$seed" 0 0 "$@"
  run "$OUT/s$seed-killed" "$seed" 0 "$KILL_AT" "$@"
  run "$OUT/s$seed-rejoined" "$seed" 1 "$KILL_AT" "$@"
  report "$OUT/s$seed-unfailed" "$OUT/s$seed-killed" "$OUT/s$seed-rejoined"
done
