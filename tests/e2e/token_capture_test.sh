#!/usr/bin/env bash
# The job token never travels: a 2-rank job over TCP (the rendezvous store's handshake and the
# mesh's) runs inside a fresh network namespace while tcpdump captures its loopback traffic; no
# byte sequence of the capture may be the token. The capture must hold the job id, which does
# travel, so an empty or broken capture cannot pass. Exits 77 (skipped) without root, network
# namespaces, tcpdump or python3 (capture_lib.sh).
#
#   tests/e2e/token_capture_test.sh GRADSYNC_BINARY
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: $0 GRADSYNC_BINARY" >&2; exit 2; }
gradsync="$1"
name=token_capture
source "$(dirname "$0")/capture_lib.sh"

job_token="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"  # 48 hex characters
job_id="capture-job-$$"
capture_job "$work/job.pcap" 29611 --min-bytes 1K --max-bytes 64K

grep -q -a -F "$job_id" "$work/job.pcap" || fail "the capture does not hold the job's traffic"
if grep -q -a -F "$job_token" "$work/job.pcap"; then fail "the job token travelled in the clear"; fi
echo "token_capture_test: passed ($(stat -c %s "$work/job.pcap") bytes captured, token absent)"
