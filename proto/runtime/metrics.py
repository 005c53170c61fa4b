"""The ``/metrics`` HTTP endpoint every pykraft node serves for Prometheus (prometheus-client).

Each node keeps its own ``CollectorRegistry`` (so several nodes in one test process do not share
counters) and serves it with ``serve_metrics(registry, port, host)`` on ``host`` (``--metrics-host``:
``127.0.0.1`` by default; ``0.0.0.0`` in a container, so that a Prometheus in the same network scrapes it):

- ``port > 0``: that port;
- ``port == PICK_FREE_PORT`` (0, the default of ``--metrics-port``): the OS picks a free port; the
  process logs and prints ``METRICS http://127.0.0.1:<port>/metrics``;
- ``port == METRICS_OFF`` (-1): no endpoint.

A port another process serves raises ``proto.runtime.listeners.ListenerError`` (one line naming
``--metrics-port``); the server never shares a port (no SO_REUSEPORT).

The endpoint runs in prometheus-client's own daemon thread; collectors read node state at scrape
time (``Collector.collect``), so the hot paths only bump counters and histograms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from proto.runtime.listeners import listener_error

if TYPE_CHECKING:  # prometheus-client is slow to import: settings parsing takes the names below without it
    from prometheus_client import CollectorRegistry

METRICS_HOST = "127.0.0.1"
PICK_FREE_PORT = 0
METRICS_OFF = -1
METRICS_SETTING = "--metrics-port"
METRICS_HOST_SETTING = "--metrics-host"
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


@dataclass
class MetricsEndpoint:
    """A running ``/metrics`` server; ``close()`` stops it."""

    server: WSGIServer
    port: int
    host: str = METRICS_HOST

    @property
    def url(self) -> str:
        """Where this machine reaches the endpoint (loopback when it listens on every address)."""
        host = METRICS_HOST if self.host in WILDCARD_HOSTS else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_metrics(
    registry: CollectorRegistry, port: int, host: str = METRICS_HOST
) -> MetricsEndpoint | None:
    """Serve ``registry`` on ``host``:``port`` (see the module docstring); None when ``METRICS_OFF``."""
    if port == METRICS_OFF:
        return None
    if port < METRICS_OFF or port > 65535:
        raise ValueError(f"metrics port {port}: must be 1..65535, {PICK_FREE_PORT} (pick a free port) "
                         f"or {METRICS_OFF} (off)")
    from prometheus_client import start_http_server

    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:  # one line naming the setting (proto.runtime.listeners), not a traceback
        raise listener_error(METRICS_SETTING, str(port), exc) from None
    return MetricsEndpoint(server, server.server_port, host)
