#!/usr/bin/env bash
# A real HTTP server for training data (`gradsync train --data-url`): Debian's nginx serving a
# directory of shards (`gradsync shard --output DIR`), with its own configuration, pid file and
# access log under a work directory, so several can run at once and nothing system-wide changes.
#
#   scripts/data_server.sh start --root DIR --port PORT --work WORK [--listen ADDR]
#                                [--limit-rate RATE]
#       starts nginx in the background (returns once it answers); prints the base URL.
#       --limit-rate caps each transfer (nginx syntax: 300k = 300 KB/s), to emulate a slow store
#   scripts/data_server.sh stop --work WORK
#       stops it (fast shutdown: transfers in flight are cut, as when a server dies)
#
# WORK/access.log has one line per request ("GET /train-00003.gss 200 784020"): the tests count
# the shards a run fetched from it. Needs nginx (scripts/setup.sh installs it).
set -euo pipefail

die() { echo "data_server: error: $*" >&2; exit 2; }
[ $# -ge 1 ] || die "usage: data_server.sh start|stop [options] (see the header)"
mode="$1"
shift
root="" port="" work="" listen="0.0.0.0" limit_rate=0
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || die "$1 needs a value"
  case "$1" in
    --root) root="$2" ;;
    --port) port="$2" ;;
    --work) work="$2" ;;
    --listen) listen="$2" ;;
    --limit-rate) limit_rate="$2" ;;
    *) die "unknown argument '$1'" ;;
  esac
  shift 2
done
[ -n "$work" ] || die "--work is required"
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
[ -x "$nginx_bin" ] || die "nginx not found (apt-get install nginx, or scripts/setup.sh)"

case "$mode" in
  start)
    [ -d "$root" ] || die "--root '$root' is not a directory"
    [ -f "$root/manifest.txt" ] || die "--root '$root' has no manifest.txt (gradsync shard --output)"
    [[ "$port" =~ ^[0-9]+$ ]] || die "--port must be a number"
    mkdir -p "$work"
    work="$(cd "$work" && pwd)" root="$(cd "$root" && pwd)"
    # nginx's workers run as nobody when started by root: they must be able to read the shards.
    chmod -R a+rX "$root"
    cat > "$work/nginx.conf" <<CONF
daemon on;
worker_processes 1;
pid $work/nginx.pid;
error_log $work/error.log warn;
events { worker_connections 256; }
http {
  default_type application/octet-stream;
  log_format shards '\$request_method \$uri \$status \$body_bytes_sent';
  access_log $work/access.log shards;
  client_body_temp_path $work/tmp-body;
  proxy_temp_path $work/tmp-proxy;
  fastcgi_temp_path $work/tmp-fastcgi;
  uwsgi_temp_path $work/tmp-uwsgi;
  scgi_temp_path $work/tmp-scgi;
  sendfile on;
  limit_rate $limit_rate;
  server {
    listen $listen:$port reuseport;
    root $root;
    location / { }
  }
}
CONF
    "$nginx_bin" -q -p "$work" -c "$work/nginx.conf" 2>"$work/start.err" ||
      die "nginx did not start: $(cat "$work/start.err")"
    host="$listen"
    [ "$host" = "0.0.0.0" ] && host=127.0.0.1
    for _ in $(seq 50); do
      if curl -sf -o /dev/null "http://$host:$port/manifest.txt"; then
        echo "http://$host:$port"
        exit 0
      fi
      sleep 0.1
    done
    die "nginx started but does not answer on $host:$port (see $work/error.log)" ;;
  stop)
    [ -f "$work/nginx.pid" ] || exit 0
    pid="$(cat "$work/nginx.pid")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || exit 0
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true ;;
  *) die "unknown mode '$mode' (start or stop)" ;;
esac
