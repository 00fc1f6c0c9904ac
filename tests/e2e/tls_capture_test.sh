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
name=tls_capture
source "$(dirname "$0")/capture_lib.sh"
job_id="tls-capture-$$"
job_token="capture-token-$$"

# Whether the capture $1 holds rank 0's inputs 40.0 .. 45.0 as consecutive float32s.
holds_gradients() {
  python3 - "$1" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
sys.exit(0 if struct.pack("<6f", 40, 41, 42, 43, 44, 45) in data else 1)
PY
}

capture_job "$work/plain.pcap" 29612 --min-bytes 64K --max-bytes 64K
holds_gradients "$work/plain.pcap" || fail "the plaintext capture shows no gradients: check broken"
capture_job "$work/tls.pcap" 29612 --min-bytes 64K --max-bytes 64K --tls
if holds_gradients "$work/tls.pcap"; then fail "gradients travelled in the clear with --tls"; fi
python3 - "$work/tls.pcap" <<'PY' || fail "the TLS capture holds no TLS handshake"
import sys
data = open(sys.argv[1], "rb").read()
sys.exit(0 if b"\x16\x03\x01" in data else 1)  # a ClientHello's record header
PY
echo "tls_capture_test: passed (gradients visible without --tls, absent with it:" \
  "$(stat -c %s "$work/tls.pcap") bytes captured)"
