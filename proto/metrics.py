"""The ``/metrics`` HTTP endpoint every pykraft node serves for Prometheus (prometheus-client).

Each node keeps its own ``CollectorRegistry`` (so several nodes in one test process do not share
counters) and serves it on ``127.0.0.1`` with ``serve_metrics(registry, port)``:

- ``port > 0``: that port;
- ``port == PICK_FREE_PORT`` (0, the default of ``--metrics-port``): the OS picks a free port; the
  process logs and prints ``METRICS http://127.0.0.1:<port>/metrics``;
- ``port == METRICS_OFF`` (-1): no endpoint.

A port another process serves raises ``proto.listeners.ListenerError`` (one line naming
``--metrics-port``); the server never shares a port (no SO_REUSEPORT).

The endpoint runs in prometheus-client's own daemon thread; collectors read node state at scrape
time (``Collector.collect``), so the hot paths only bump counters and histograms.
"""

from __future__ import annotations

from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from proto.listeners import listener_error

METRICS_HOST = "127.0.0.1"
PICK_FREE_PORT = 0
METRICS_OFF = -1
METRICS_SETTING = "--metrics-port"


@dataclass
class MetricsEndpoint:
    """A running ``/metrics`` server; ``close()`` stops it."""

    server: WSGIServer
    port: int

    @property
    def url(self) -> str:
        return f"http://{METRICS_HOST}:{self.port}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_metrics(registry: CollectorRegistry, port: int) -> MetricsEndpoint | None:
    """Serve ``registry`` on 127.0.0.1:``port`` (see the module docstring); None when ``METRICS_OFF``."""
    if port == METRICS_OFF:
        return None
    if port < METRICS_OFF or port > 65535:
        raise ValueError(f"metrics port {port}: must be 1..65535, {PICK_FREE_PORT} (pick a free port) "
                         f"or {METRICS_OFF} (off)")
    try:
        server, _thread = start_http_server(port, addr=METRICS_HOST, registry=registry)
    except OSError as exc:  # one line naming the setting (proto.listeners), not a traceback
        raise listener_error(METRICS_SETTING, str(port), exc) from None
    return MetricsEndpoint(server, server.server_port)
