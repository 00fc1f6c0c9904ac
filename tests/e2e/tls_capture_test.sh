#!/usr/bin/env bash
# --tls encrypts the links between ranks: a 2-rank `gradsync bench allreduce` runs in a fresh
# network namespace under tcpdump, once without TLS and once with it. The benchmark's inputs are
# known floats (rank 0 sends 40.0, 41.0, ... 45.0 in a row inside every chunk): the plaintext
# run's capture must hold them (so the check can see gradients at all), the TLS run's must not.
# Exits 77 (skipped) without root, network namespaces, tcpdump or python3.
#
#   tests/e2e/tls_capture_test.sh GRADSYNC_BINARY
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 GRADSYNC_BINARY" >&2; exit 2; }
gradsync="$1"
skip() { echo "skipped: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root for a network namespace and a capture"
command -v tcpdump >/dev/null || skip "tcpdump unavailable (scripts/setup.sh installs it)"
command -v python3 >/dev/null || skip "python3 unavailable"
ns="gstls$$"
ip netns add "$ns" 2>/dev/null || skip "ip netns unavailable"
work="$(mktemp -d /tmp/tls_capture.XXXXXX)"
capture=""
cleanup() {
  [ -n "$capture" ] && kill "$capture" 2>/dev/null
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ip netns exec "$ns" ip link set lo up

# Runs the job with extra flags ($2...) while capturing into $1.
capture_job() {
  local pcap="$1"
  shift
  ip netns exec "$ns" tcpdump -i lo -U -s 0 -w "$pcap" 2>"$work/tcpdump.log" &
  capture=$!
  for _ in $(seq 50); do grep -q "listening on" "$work/tcpdump.log" && break; sleep 0.1; done
  grep -q "listening on" "$work/tcpdump.log" || fail "tcpdump did not start"
  local pids=()
  for rank in 0 1; do
    ip netns exec "$ns" env RANK="$rank" WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29612 \
      GRADSYNC_JOB_ID="tls-capture-$$" GRADSYNC_JOB_TOKEN="capture-token-$$" \
      timeout 60 "$gradsync" bench allreduce --min-bytes 64K --max-bytes 64K --iters 2 "$@" \
      >"$work/rank$rank.txt" 2>&1 &
    pids+=($!)
  done
  for i in 0 1; do
    wait "${pids[$i]}" || fail "rank $i failed ($*): $(cat "$work/rank$i.txt")"
  done
  sleep 0.5  # the last packets reach the capture file (-U writes each packet at once)
  kill -INT "$capture"
  wait "$capture" 2>/dev/null || true
  capture=""
  [ -s "$pcap" ] || fail "the capture is empty"
}

# Whether the capture $1 holds rank 0's inputs 40.0 .. 45.0 as consecutive float32s.
holds_gradients() {
  python3 - "$1" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
sys.exit(0 if struct.pack("<6f", 40, 41, 42, 43, 44, 45) in data else 1)
PY
}

capture_job "$work/plain.pcap"
holds_gradients "$work/plain.pcap" || fail "the plaintext capture shows no gradients: check broken"
capture_job "$work/tls.pcap" --tls
if holds_gradients "$work/tls.pcap"; then fail "gradients travelled in the clear with --tls"; fi
python3 - "$work/tls.pcap" <<'PY' || fail "the TLS capture holds no TLS handshake"
import sys
data = open(sys.argv[1], "rb").read()
sys.exit(0 if b"\x16\x03\x01" in data else 1)  # a ClientHello's record header
PY
echo "tls_capture_test: passed (gradients visible without --tls, absent with it:" \
  "$(stat -c %s "$work/tls.pcap") bytes captured)"
