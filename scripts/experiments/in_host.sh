#!/usr/bin/env bash
# Runs COMMAND inside an emulated host of scripts/netem (`netem run -- in_host.sh COMMAND...`):
# binds PyTorch's Gloo to the host's own interface, the one holding $NETEM_ADDR (otherwise Gloo
# resolves the machine's hostname, an address the namespace cannot reach), then execs COMMAND.
set -euo pipefail
if [ -n "${NETEM_ADDR:-}" ] && [ -z "${GLOO_SOCKET_IFNAME:-}" ]; then
  GLOO_SOCKET_IFNAME="$(ip -o -4 addr show | awk -v a="$NETEM_ADDR" 'index($4, a "/") == 1 {print $2; exit}')"
  [ -n "$GLOO_SOCKET_IFNAME" ] || { echo "in_host: no interface holds $NETEM_ADDR" >&2; exit 1; }
  export GLOO_SOCKET_IFNAME
fi
exec "$@"
