#!/usr/bin/env bash
# A private Docker engine for tests and CI: its own socket, data root, exec root and pidfile, no iptables, no bridge
# (containers use host or no networking). Nothing here touches a system-wide Docker.
#
#   infra/dockerd.sh start   # installs Debian's docker.io if dockerd is missing, starts, waits; prints DOCKER_HOST=...
#   infra/dockerd.sh stop    # SIGTERM by PID, SIGKILL after 30 s
#   infra/dockerd.sh status
#
# OLTUNES_DOCKERD_DIR (default /tmp/oltunes-dockerd-<uid>: one engine per user, never shared) holds everything;
# export the printed DOCKER_HOST for clients (or give it to a deployment: prefect.yaml `job_variables: env:`).
set -euo pipefail

DIR=${OLTUNES_DOCKERD_DIR:-/tmp/oltunes-dockerd-$(id -u)}
SOCK=$DIR/docker.sock
PIDFILE=$DIR/dockerd.pid
LOG=$DIR/dockerd.log
export DOCKER_HOST=unix://$SOCK

running() { [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }
ping() { curl -sf --unix-socket "$SOCK" http://docker/_ping >/dev/null 2>&1; }

install_engine() {
  command -v dockerd >/dev/null && return
  [[ $(id -u) == 0 ]] || { echo "dockerd is missing and installing docker.io needs root" >&2; exit 1; }
  echo "installing docker.io (Debian) ..." >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >&2
}

start() {
  if running && ping; then echo "DOCKER_HOST=$DOCKER_HOST"; return; fi
  install_engine
  command -v curl >/dev/null || { echo "curl is needed to probe the engine" >&2; exit 1; }
  mkdir -p "$DIR/data" "$DIR/exec"
  # setsid: the engine outlives this script's session but is stopped by PID (stop), never by name.
  setsid dockerd -H "$DOCKER_HOST" --data-root "$DIR/data" --exec-root "$DIR/exec" --pidfile "$PIDFILE" \
    --iptables=false --ip6tables=false --bridge=none --log-level=warn >"$LOG" 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    if ping; then echo "DOCKER_HOST=$DOCKER_HOST"; return; fi
    sleep 0.5
  done
  echo "dockerd did not answer on $SOCK within 60 s; log tail:" >&2
  tail -20 "$LOG" >&2
  exit 1
}

stop() {
  running || { rm -f "$PIDFILE"; return; }
  local pid; pid=$(cat "$PIDFILE")
  kill -TERM "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -KILL "$pid" 2>/dev/null || true
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) if running && ping; then echo "running: DOCKER_HOST=$DOCKER_HOST"; else echo "stopped"; exit 3; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
