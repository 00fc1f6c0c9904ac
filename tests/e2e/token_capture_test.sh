#!/usr/bin/env bash
# The job token never travels: a 2-rank job over TCP (the rendezvous store's handshake and the
# mesh's) runs inside a fresh network namespace while tcpdump captures its loopback traffic; no
# byte sequence of the capture may be the token. The capture must hold the job id, which does
# travel, so an empty or broken capture cannot pass. Exits 77 (skipped) without root, network
# namespaces or tcpdump (scripts/setup.sh installs it).
#
#   tests/e2e/token_capture_test.sh GRADSYNC_BINARY
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 GRADSYNC_BINARY" >&2; exit 2; }
gradsync="$1"
skip() { echo "skipped: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root for a network namespace and a capture"
command -v tcpdump >/dev/null || skip "tcpdump unavailable (scripts/setup.sh installs it)"
ns="gscap$$"
ip netns add "$ns" 2>/dev/null || skip "ip netns unavailable"
work="$(mktemp -d /tmp/token_capture.XXXXXX)"
capture=""
cleanup() {
  [ -n "$capture" ] && kill "$capture" 2>/dev/null
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ip netns exec "$ns" ip link set lo up

token="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"  # 48 hex characters
job="capture-job-$$"
ip netns exec "$ns" tcpdump -i lo -U -s 0 -w "$work/job.pcap" 2>"$work/tcpdump.log" &
capture=$!
for _ in $(seq 50); do grep -q "listening on" "$work/tcpdump.log" && break; sleep 0.1; done
grep -q "listening on" "$work/tcpdump.log" || fail "tcpdump did not start: $(cat "$work/tcpdump.log")"

pids=()
for rank in 0 1; do
  ip netns exec "$ns" env RANK="$rank" WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29611 \
    GRADSYNC_JOB_ID="$job" GRADSYNC_JOB_TOKEN="$token" \
    timeout 60 "$gradsync" bench allreduce --min-bytes 1K --max-bytes 64K --iters 2 \
    >"$work/rank$rank.txt" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  wait "${pids[$i]}" || fail "rank $i failed: $(cat "$work/rank$i.txt")"
done
sleep 0.5  # the last packets reach the capture file (-U writes each packet at once)
kill -INT "$capture"
wait "$capture" 2>/dev/null || true
capture=""

[ -s "$work/job.pcap" ] || fail "the capture is empty"
grep -q -a -F "$job" "$work/job.pcap" || fail "the capture does not hold the job's traffic"
if grep -q -a -F "$token" "$work/job.pcap"; then fail "the job token travelled in the clear"; fi
echo "token_capture_test: passed ($(stat -c %s "$work/job.pcap") bytes captured, token absent)"
