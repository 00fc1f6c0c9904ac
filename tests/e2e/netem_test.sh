#!/usr/bin/env bash
# End-to-end on emulated hosts: gradsync ranks in separate network namespaces (scripts/netem),
# talking over shaped veth links through a bridge.
#
#   tests/e2e/netem_test.sh GRADSYNC_BINARY NETEM_SCRIPT
#
# Cases (NETEM_TEST_CASES="train_tcp train_mpi killed_host" picks some):
#   train_tcp    3 hosts at 200 Mbit/s train 20 steps over TCP, bootstrapped from the torchrun
#                style environment netem sets; rank 0's summary and metrics say 3 workers, every
#                rank connected, and every host's eth0 sent the gradients (veth byte counters).
#   train_mpi    the same over the MPI transport, launched by netem's mpirun mode.
#   killed_host  host 2 is SIGKILLed mid-training: the run ends within a bound with a non-zero
#                status and the survivors' errors name rank 2.
#   emulated     2 hosts at 1 Gbit/s train 4 steps of emulated accelerator compute (the
#                ResNet-50 profile, --compute emulate:resnet50) with p3: its 102 MB of
#                gradients per step crossed each host's eth0.
#   hosts_2x2    2 hosts of 2 ranks each (--ranks-per-host): every rank finds the topology from
#                the namespaces alone, talks to its host's other rank through shared memory and
#                to the other host over the shaped link; training goes through the hierarchical
#                allreduce, and no segment is left in /dev/shm.
#   partition_2_2, partition_3_1  an elastic job of 4 hosts is cut in two by blackhole routes
#                (2 | 2 and 3 | 1): the side with the store trains on, the other completes no
#                step after the one the cut interrupted and exits saying it is cut off (docs/cluster.md, "Network
#                partitions").
# After every case no namespace or bridge of that netem run is left. Exits 77 (skipped) without
# root, ip/tc or network namespaces.
# shellcheck disable=SC2016  # the hosts' bash -c scripts expand their own variables
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 GRADSYNC_BINARY NETEM_SCRIPT" >&2; exit 2; }
gradsync="$1" netem="$2"
skip() { echo "skipped: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces"
if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
  skip "ip/tc unavailable (install iproute2)"
fi
probe="gsnprobe$$"
if ! ip netns add "$probe" 2>/dev/null; then skip "ip netns unavailable"; fi
ip netns del "$probe"
[ -x "$gradsync" ] || fail "gradsync binary '$gradsync' not found"
[ -x "$netem" ] || fail "netem script '$netem' not found"
"$gradsync" train --help >/dev/null 2>&1 || skip "gradsync built without LibTorch (no train)"

tmp="$(mktemp -d /tmp/netem_test.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
export GRADSYNC_LOG_LEVEL=info

now_ms() { local t="${EPOCHREALTIME//[!0-9]/}"; echo $((t / 1000)); }

# run_netem NAME NETEM_ARGS...: runs scripts/netem with the log in $tmp/NAME.log (shown
# indented), sets `status` and `seconds`, and fails if the run left a namespace or its bridge.
run_netem() {
  local name="$1" t0 id
  shift
  echo "== $name: netem $*"
  t0="$(now_ms)"
  status=0
  "$netem" "$@" > "$tmp/$name.log" 2>&1 || status=$?
  seconds=$((($(now_ms) - t0 + 500) / 1000))
  sed 's/^/   /' "$tmp/$name.log"
  echo "== $name: exit status $status after ${seconds}s"
  id="$(sed -n 's/^netem: .* hosts on gsb\([0-9]*\) .*/\1/p' "$tmp/$name.log")"
  [ -n "$id" ] || fail "$name: netem did not set up its hosts"
  if ip netns list | grep -q "^gsn${id}h"; then
    fail "$name: namespaces left behind: $(ip netns list | grep "^gsn${id}h" | tr '\n' ' ')"
  fi
  if ip link show "gsb$id" >/dev/null 2>&1; then fail "$name: bridge gsb$id left behind"; fi
}

# expect NAME ERE WHAT: the case's log has a line matching ERE.
expect() { grep -Eq "$2" "$tmp/$1.log" || fail "$1: expected $3 (/$2/ in its log)"; }

train=(train --model mlp --dataset synthetic --batch-size 32 --quiet)

case_train_tcp() {
  # Each host prints its eth0 transmit counter after training: bytes that crossed its veth.
  run_netem train_tcp --hosts 3 --rate 200mbit --timeout 240 run -- bash -c \
    '"$0" "$@" && echo "eth0 tx_bytes $(cat /sys/class/net/eth0/statistics/tx_bytes)"' \
    "$gradsync" "${train[@]}" --steps 20 --metrics "$tmp/m.json"
  [ "$status" -eq 0 ] || fail "train_tcp: exit status $status"
  expect train_tcp '^\[h0\] gradsync train: mlp on synthetic, 3 workers' "rank 0's summary line"
  grep -Eq '"workers": 3[,}]?$' "$tmp/m.json" || fail "train_tcp: metrics do not say 3 workers"
  local h bytes
  for h in 0 1 2; do
    expect train_tcp "^\[h$h\] .*rank $h of 3 connected" "rank $h connected"
    bytes="$(sed -n "s/^\[h$h\] eth0 tx_bytes \([0-9]*\)$/\1/p" "$tmp/train_tcp.log")"
    # A ring allreduce of mlp's 2.7 MB of gradients sends 3.6 MB per rank and step.
    if [ -z "$bytes" ] || [ "$bytes" -lt 20000000 ]; then
      fail "train_tcp: host h$h's eth0 sent ${bytes:-no} bytes, expected >= 20 MB"
    fi
  done
}

case_killed_host() {
  # Host 2 kills its rank once its eth0 has sent 10 MB (training under way, whatever the load).
  GRADSYNC_TIMEOUT=10s run_netem killed_host --hosts 3 --rate 200mbit --timeout 120 run -- bash -c '
    if [ "$NETEM_HOST" != 2 ]; then exec "$0" "$@"; fi
    "$0" "$@" & rank=$!
    while kill -0 "$rank" 2>/dev/null &&
      [ "$(cat /sys/class/net/eth0/statistics/tx_bytes)" -lt 10000000 ]; do sleep 0.1; done
    kill -KILL "$rank"; wait "$rank"' "$gradsync" "${train[@]}" --steps 2000
  [ "$status" -ne 0 ] || fail "killed_host: exit status 0 although rank 2 was killed"
  [ "$seconds" -le 60 ] || fail "killed_host: took ${seconds}s to report the lost rank"
  # netem reports first the host that ended first: h2, unless a survivor beat its wrapper shell.
  expect killed_host '^netem: host h2 (failed with exit|exited with) status 137' "netem naming host h2"
  expect killed_host '^\[h0\] gradsync: error: .*rank 2' "rank 0's error naming rank 2"
  expect killed_host '^\[h1\] gradsync: error: .*rank 2' "rank 1's error naming rank 2"
}

case_train_mpi() {
  # The MPI transport across the hosts: mpirun's daemons enter the namespaces (netem-agent) and
  # Open MPI is restricted to TCP on the hosts' subnet, so the ranks talk over the shaped veths.
  # Open MPI's launch into the namespaces hangs now and then before any rank connects (a daemon
  # never reports back to mpirun; 1 run in 21 here on a loaded machine, twice in CI's clean
  # clones; docs/testing.md): then, and only then, it is tried once more. A hang or a failure
  # after the ranks connected fails at once.
  local attempt
  for attempt in 1 2; do
    run_netem train_mpi --hosts 3 --rate 200mbit --timeout 120 mpirun -- \
      "$gradsync" "${train[@]}" --transport mpi --steps 20 --metrics "$tmp/mpi.json"
    [ "$status" -eq 124 ] && ! grep -q "connected over MPI" "$tmp/train_mpi.log" || break
    echo "== train_mpi: Open MPI's launch hung before any rank connected (attempt $attempt)"
  done
  [ "$status" -eq 0 ] || fail "train_mpi: exit status $status"
  expect train_mpi '^gradsync train: mlp on synthetic, 3 workers' "rank 0's summary line"
  grep -Eq '"workers": 3[,}]?$' "$tmp/mpi.json" || fail "train_mpi: metrics do not say 3 workers"
  local r
  for r in 0 1 2; do
    expect train_mpi "rank $r of 3 connected over MPI" "rank $r connected over MPI"
  done
}

case_emulated() {
  run_netem emulated --hosts 2 --rate 1gbit --timeout 240 run -- bash -c \
    '"$0" "$@" && echo "eth0 tx_bytes $(cat /sys/class/net/eth0/statistics/tx_bytes)"' \
    "$gradsync" train --compute emulate:resnet50 --compute-scale 0.5 --schedule p3 --steps 4 \
    --quiet
  [ "$status" -eq 0 ] || fail "emulated: exit status $status"
  expect emulated '^\[h0\] gradsync train: emulated resnet50 \(compute x 0.5\), 2 workers' \
    "rank 0's summary line"
  local h bytes
  for h in 0 1; do
    bytes="$(sed -n "s/^\[h$h\] eth0 tx_bytes \([0-9]*\)$/\1/p" "$tmp/emulated.log")"
    # A ring allreduce of ResNet-50's 102 MB sends 102 MB per rank on 2 ranks, 4 steps.
    if [ -z "$bytes" ] || [ "$bytes" -lt 400000000 ]; then
      fail "emulated: host h$h's eth0 sent ${bytes:-no} bytes, expected >= 400 MB"
    fi
  done
}

case_hosts_2x2() {
  run_netem hosts_2x2 --hosts 2 --ranks-per-host 2 --rate 200mbit --timeout 240 run -- \
    "$gradsync" "${train[@]}" --steps 20 --metrics "$tmp/2x2.json"
  [ "$status" -eq 0 ] || fail "hosts_2x2: exit status $status"
  expect hosts_2x2 '^\[h0\.0\] gradsync train: mlp on synthetic, 4 workers' "rank 0's summary line"
  local r
  for r in 0 1 2 3; do
    local mates="0, 1"
    [ "$r" -ge 2 ] && mates="2, 3"
    expect hosts_2x2 "rank $r: 2 hosts x 2 ranks; ranks $mates through shared memory" \
      "rank $r to find 2 hosts of 2 ranks"
  done
  if ls /dev/shm | grep -q '^gradsync-'; then
    fail "hosts_2x2: segments left in /dev/shm: $(ls /dev/shm | grep '^gradsync-' | tr '\n' ' ')"
  fi
}

# partition MAJORITY: 4 hosts train --elastic 2:4, the store on host 0 (RANK 0 serves it). Once
# training is under way (host 0's eth0 sent 100 MB), every host installs blackhole routes to the
# hosts of the other side: hosts 0..MAJORITY-1 with the store, the rest without (2 | 2, 3 | 1).
# The side with the store re-forms without the others and trains on (round 1 of MAJORITY
# workers); the other side completes no step after the one the cut interrupted, which round 1
# trains again (its last completed step is at most the first of round 1: a worker logs a step's
# line before the step's gradients leave, so a logged step N + 1 says step N completed; the cut
# step completes there when every share reached it before its routes went, and that copy dies
# with the worker). Every worker of it exits with an error saying it is cut off, within
# 2 x --timeout (16 s) of the cut. The job itself runs until netem's grace ends it after that.
case_partition() {
  local majority="$1" name="partition_$1_$((4 - $1))"
  local samples="$tmp/samples_$name" trigger="$tmp/cut_$name"
  export MAJORITY="$majority" TRIGGER="$trigger"  # read by the hosts' script
  NETEM_GRACE=5 GRADSYNC_TIMEOUT=8s run_netem "$name" --hosts 4 --rate none --timeout 150 \
    run -- bash -c '
    side() { [ "$1" -lt "$MAJORITY" ] && echo a || echo b; }
    (
      prefix="${NETEM_ADDR%.*}"
      if [ "$NETEM_HOST" = 0 ]; then
        while [ "$(cat /sys/class/net/eth0/statistics/tx_bytes)" -lt 100000000 ]; do sleep 0.05; done
        echo "cut at $EPOCHREALTIME" > "$TRIGGER"
      fi
      while [ ! -e "$TRIGGER" ]; do sleep 0.05; done
      for h in 0 1 2 3; do
        if [ "$(side "$h")" != "$(side "$NETEM_HOST")" ]; then
          ip route add blackhole "$prefix.$((h + 1))/32"
        fi
      done
    ) &
    "$0" "$@"
    code=$?
    echo "exit $code at $EPOCHREALTIME"
    exit "$code"' "$gradsync" train --model mlp --dataset synthetic --batch-size 32 \
    --steps 100000 --elastic 2:4 --hang-timeout 2s --record-samples "$samples" --quiet
  [ "$status" -ne 0 ] || fail "$name: the job ended by itself, not by netem's grace"
  local cut h
  cut="$(sed -n 's/^cut at //p' "$trigger")"
  [ -n "$cut" ] || fail "$name: the partition was never made"
  local first_round1 last_b=-1
  first_round1="$(awk '!/^#/ && $1 == 1 && (m == "" || $2 < m) { m = $2 } END { print m }' \
    "$samples"/worker-[0-$((majority - 1))]-0.txt)"
  [ -n "$first_round1" ] || fail "$name: the side with the store did not train a round 1"
  local last_round1
  last_round1="$(awk '!/^#/ && $1 == 1 && $2 > m { m = $2 } END { print m + 0 }' \
    "$samples"/worker-0-0.txt)"
  [ "$last_round1" -ge $((first_round1 + 100)) ] ||
    fail "$name: round 1 trained only steps $first_round1-$last_round1"
  awk -v n="$majority" '!/^#/ && $1 == 1 && $5 != n { bad = 1 } END { exit bad }' \
    "$samples"/worker-[0-$((majority - 1))]-0.txt || fail "$name: round 1 is not of $majority workers"
  for ((h = majority; h < 4; h++)); do
    expect "$name" "^\[h$h\] gradsync: error: worker $h cannot reach the job's store to re-form after round 0: it is cut off" \
      "host $h's error saying it is cut off"
    local exited
    exited="$(sed -n "s/^\[h$h\] exit 1 at //p" "$tmp/$name.log")"
    [ -n "$exited" ] || fail "$name: host $h did not exit with status 1"
    awk -v a="$cut" -v b="$exited" 'BEGIN { exit !(b - a <= 16) }' ||
      fail "$name: host $h exited $(awk -v a="$cut" -v b="$exited" 'BEGIN { print b - a }')s after the cut (bound 16 s)"
    echo "   host $h exited $(awk -v a="$cut" -v b="$exited" 'BEGIN { printf "%.1f", b - a }') s after the cut"
    if awk '!/^#/ && $1 >= 1 { found = 1 } END { exit !found }' "$samples/worker-$h-0.txt"; then
      fail "$name: host $h trained in a round after the cut"
    fi
    local completed  # the step before the last logged one
    completed="$(awk '!/^#/ && $2 > m { m = $2 } END { print m - 1 }' "$samples/worker-$h-0.txt")"
    if [ "$completed" -gt "$last_b" ]; then last_b="$completed"; fi
  done
  [ "$last_b" -le "$first_round1" ] ||
    fail "$name: the cut-off side completed step $last_b, past round 1's first step $first_round1"
  echo "   round 1 of $majority workers: steps $first_round1-$last_round1; the cut-off side's last completed step $last_b"
}
case_partition_2_2() { case_partition 2; }
case_partition_3_1() { case_partition 3; }

# More cases: a case_NAME function built from run_netem and expect, added to the default list.
read -r -a cases <<< "${NETEM_TEST_CASES:-train_tcp train_mpi killed_host emulated hosts_2x2 partition_2_2 partition_3_1}"
for c in "${cases[@]}"; do
  declare -F "case_$c" >/dev/null || fail "unknown case '$c'"
  "case_$c"
  echo "== $c: passed"
done
echo "netem_test: all passed (${cases[*]})"
