#!/usr/bin/env bash
# Live peer recovery of an elastic job, measured on real processes: 4 workers of the language
# model (gpt:layers=4,width=512: 154.9 MB of model and AdamW moments by the kill) under
# `gradsync launch --elastic --max-restarts 1`; after --kill-after seconds the newest worker is
# SIGKILLed, the launcher restarts it and the next round's rank 0 gives it the job's state.
# Prints every round's line of rank 0 (`elastic: the job's state (...) to K of the N other
# members in ... s (... MB/s to each ...)`, docs/cluster.md "How fast"), --repeats times; with
# --before BINARY, each repeat runs that binary first (interleaved pairs, as before/after).
# With --netem RATE the 4 workers are 4 hosts of scripts/netem (one rank each, TCP over links of
# RATE, "none" for unshaped veths; needs root): host 3's worker is killed and its host starts it
# again (the store is worker 0's, as without a launcher).
#
#   scripts/bench_recovery.sh [--gradsync build/apps/gradsync/gradsync] [--before BINARY]
#                             [--repeats 2] [--kill-after 25] [--netem RATE]
#                             [--out /tmp/gradsync-recovery]
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
gradsync="$repo/build/apps/gradsync/gradsync" before="" repeats=2 kill_after=25 netem=""
out=/tmp/gradsync-recovery
while [ $# -gt 0 ]; do
  case $1 in
    --gradsync) gradsync=$(realpath "$2"); shift 2 ;;
    --before) before=$(realpath "$2"); shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --kill-after) kill_after=$2; shift 2 ;;
    --netem) netem=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "bench_recovery.sh: unknown argument '$1' (see the header)" >&2; exit 2 ;;
  esac
done
[ -x "$gradsync" ] || { echo "bench_recovery.sh: no gradsync at $gradsync (make build)" >&2; exit 2; }
mkdir -p "$out"

train_args=(--elastic 3:4 --model gpt:layers=4,width=512 --steps 60 --batch-size 4 --eval-samples 4)

# run_netem BINARY LOG: the same job on 4 netem hosts; each host runs its worker again once if it
# fails, and host 3's is killed (its process is named after its host, for pkill).
run_netem() {
  local bin=$1 log=$2 job
  GRADSYNC_LOG_LEVEL=info NETEM_GRACE=20 "$repo/scripts/netem" --hosts 4 --rate "$netem" \
    --timeout 600 run -- bash -c '
    for try in 1 2; do
      (exec -a "recovery-host$NETEM_HOST $0" "$0" train "$@") && exit 0
    done
    exit 1' "$bin" "${train_args[@]}" >"$log" 2>&1 &
  job=$!
  sleep "$kill_after"
  pkill -9 -f "^recovery-host3 " || { echo "no worker to kill: see $log" >&2; return 1; }
  wait "$job" || { echo "the job failed: see $log" >&2; return 1; }
  grep -E "elastic: (the job's state|the [0-9]+ other members held)" "$log" | sed "s|^|$(basename "$bin"): |"
}

# run BINARY LOG: one job, one worker killed and restarted; prints rank 0's state lines.
run() {
  [ -z "$netem" ] || { run_netem "$@"; return; }
  local bin=$1 log=$2 launcher victim
  GRADSYNC_LOG_LEVEL=info "$bin" launch -n 4 --elastic --max-restarts 1 -- "$bin" train \
    "${train_args[@]}" >"$log" 2>&1 &
  launcher=$!
  sleep "$kill_after"
  victim=$(pgrep -f -n "$bin train --elastic") || { echo "no worker to kill: see $log" >&2; return 1; }
  kill -9 "$victim"
  wait "$launcher" || { echo "the job failed: see $log" >&2; return 1; }
  grep -E "elastic: (the job's state|the [0-9]+ other members held)" "$log" | sed "s|^|$(basename "$bin"): |"
}

cd "$repo"
for i in $(seq 1 "$repeats"); do
  if [ -n "$before" ]; then run "$before" "$out/before-$i.log"; fi
  run "$gradsync" "$out/after-$i.log"
done
