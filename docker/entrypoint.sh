#!/bin/sh
# The image's entry point: runs a pykraft process configured from PYKRAFT_* environment variables.
#
#   controller   pykraft controller --node-id $PYKRAFT_NODE_ID --listen $PYKRAFT_LISTEN
#                  --voters $PYKRAFT_VOTERS --data-dir $PYKRAFT_DATA_DIR [--override k=v ...]
#   broker       pykraft broker --node-id $PYKRAFT_NODE_ID --listen $PYKRAFT_LISTEN
#                  --controllers $PYKRAFT_CONTROLLERS --data-dir $PYKRAFT_DATA_DIR
#                  [--advertised-listeners $PYKRAFT_ADVERTISED_LISTENERS] [--override k=v ...]
#   healthcheck  exit 0 when this container's node answers SERVING on grpc.health.v1 (at PYKRAFT_LISTEN)
#   anything else is run as given (e.g. `pykraft topics list --bootstrap controller-1:9093`)
#
# PYKRAFT_LISTEN defaults to 0.0.0.0:9093 (controller) / 0.0.0.0:9092 (broker); PYKRAFT_DATA_DIR to
# /var/lib/pykraft/data (the volume); PYKRAFT_OVERRIDES is a list of Kafka-named settings,
# "key=value" separated by spaces or commas (e.g. "min.insync.replicas=2 default.replication.factor=3").
# Every node serves Prometheus metrics on $PYKRAFT_METRICS_HOST:$PYKRAFT_METRICS_PORT (default
# 0.0.0.0:9100, reachable inside the compose network only unless published; -1 turns it off).
# Extra arguments after the role are passed on. A missing required variable exits 2 naming it.
set -eu

need() {  # need NAME: the value of $NAME, or exit 2 naming it
  eval "value=\${$1:-}"
  if [ -z "$value" ]; then
    echo "pykraft-entrypoint: error: set $1 (see docker/entrypoint.sh)" >&2
    exit 2
  fi
  printf '%s' "$value"
}

overrides() {  # print "--override k=v" pairs for PYKRAFT_OVERRIDES
  for item in $(printf '%s' "${PYKRAFT_OVERRIDES:-}" | tr ',' ' '); do
    printf ' --override %s' "$item"
  done
}

metrics() {  # print the metrics endpoint's flags
  printf ' --metrics-port %s --metrics-host %s' "${PYKRAFT_METRICS_PORT:-9100}" "${PYKRAFT_METRICS_HOST:-0.0.0.0}"
}

role="${1:-controller}"
[ "$#" -gt 0 ] && shift
data_dir="${PYKRAFT_DATA_DIR:-/var/lib/pykraft/data}"

case "$role" in
  controller)
    node_id="$(need PYKRAFT_NODE_ID)"
    voters="$(need PYKRAFT_VOTERS)"
    # shellcheck disable=SC2046  # word splitting of the override list is intended
    exec pykraft controller --node-id "$node_id" --listen "${PYKRAFT_LISTEN:-0.0.0.0:9093}" \
      --voters "$voters" --data-dir "$data_dir" $(metrics) $(overrides) "$@"
    ;;
  broker)
    node_id="$(need PYKRAFT_NODE_ID)"
    controllers="$(need PYKRAFT_CONTROLLERS)"
    set -- --node-id "$node_id" --listen "${PYKRAFT_LISTEN:-0.0.0.0:9092}" \
      --controllers "$controllers" --data-dir "$data_dir" "$@"
    if [ -n "${PYKRAFT_ADVERTISED_LISTENERS:-}" ]; then
      set -- "$@" --advertised-listeners "$PYKRAFT_ADVERTISED_LISTENERS"
    fi
    # shellcheck disable=SC2046
    exec pykraft broker "$@" $(metrics) $(overrides)
    ;;
  healthcheck)
    # Probe the address this node listens on (0.0.0.0 or unset: loopback; a name: its own address).
    listen="${PYKRAFT_LISTEN:-}"
    host="${listen%:*}"
    case "$host" in "" | 0.0.0.0 | "[::]") host=127.0.0.1 ;; esac
    if [ -n "$listen" ]; then set -- "$host:${listen##*:}"; else set -- 127.0.0.1:9093 127.0.0.1:9092; fi
    exec python -c 'import sys
from proto.runtime.serving import check_health
sys.exit(0 if any(check_health(t, timeout_s=2.0) for t in sys.argv[1:]) else 1)' "$@"
    ;;
  *)
    exec "$role" "$@"
    ;;
esac
