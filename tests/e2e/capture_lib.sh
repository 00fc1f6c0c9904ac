# Shared by the capture tests (token_capture_test.sh, tls_capture_test.sh): a fresh network
# namespace whose loopback traffic tcpdump records while a 2-rank `gradsync bench allreduce`
# runs in it. Source it after setting `gradsync` (the binary) and `name` (for the namespace and
# temporary directory); it skips (exit 77) without root, network namespaces, tcpdump or python3.
# Provides: skip, fail, $work (removed on exit), capture_job PCAP PORT FLAGS...

skip() { echo "skipped: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "needs root for a network namespace and a capture"
command -v tcpdump >/dev/null || skip "tcpdump unavailable (scripts/setup.sh installs it)"
command -v python3 >/dev/null || skip "python3 unavailable"
ns="gs${name:0:6}$$"
ip netns add "$ns" 2>/dev/null || skip "ip netns unavailable"
work="$(mktemp -d "/tmp/${name}.XXXXXX")"
capture=""
cleanup() {
  [ -n "$capture" ] && kill "$capture" 2>/dev/null
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ip netns exec "$ns" ip link set lo up

# Runs a 2-rank allreduce benchmark (rendezvous on 127.0.0.1:PORT; job id and token from
# $job_id and $job_token) with FLAGS while capturing into PCAP; fails if a rank fails or the
# capture is empty. The ranks share a host, so --shm off makes their traffic TCP (what is
# captured) instead of shared memory.
capture_job() {
  local pcap="$1" port="$2"
  shift 2
  ip netns exec "$ns" tcpdump -i lo -U -s 0 -w "$pcap" 2>"$work/tcpdump.log" &
  capture=$!
  for _ in $(seq 50); do grep -q "listening on" "$work/tcpdump.log" && break; sleep 0.1; done
  grep -q "listening on" "$work/tcpdump.log" || fail "tcpdump did not start: $(cat "$work/tcpdump.log")"
  local pids=()
  for rank in 0 1; do
    ip netns exec "$ns" env RANK="$rank" WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      GRADSYNC_JOB_ID="$job_id" GRADSYNC_JOB_TOKEN="$job_token" \
      timeout 60 "$gradsync" bench allreduce --iters 2 --shm off "$@" >"$work/rank$rank.txt" 2>&1 &
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
