"""What every pykraft gRPC server adds besides its own services: health, reflection, message limits.

``add_standard_services(server, service_names)`` registers the standard ``grpc.health.v1.Health``
service (so load balancers, ``grpcurl`` and ``pykraft cluster status`` can probe a node) and server
reflection. The returned ``Health`` handle flips serving state, e.g. NOT_SERVING during shutdown.
``GRPC_OPTIONS`` raises the default 4 MiB message limits for large produce/fetch/append messages.

``start_shutdown_watchdog`` bounds a process's stop: every step of a graceful stop is bounded, so one
still running after its deadline is a bug; the process then logs ``event=shutdown_stuck`` naming the
step and exits with ``EXIT_STUCK`` instead of waiting for SIGKILL.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from proto.runtime.logfmt import log_event

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
GRPC_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]
OVERALL = ""  # the health service's name for "the whole server"
EXIT_STUCK = 3  # the shutdown watchdog fired

log = logging.getLogger(__name__)


class Health:
    """Serving state of a server's services, as seen through grpc.health.v1."""

    def __init__(self, servicer: health_aio.HealthServicer, names: list[str]) -> None:
        self._servicer = servicer
        self._names = [OVERALL, *names]

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in self._names:
            await self._servicer.set(name, status)


def add_standard_services(server: grpc.aio.Server, service_names: list[str]) -> Health:
    """Register health and reflection for ``service_names`` (full names, e.g. ``pykraft.raft.RaftService``).
    """
    servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    reflection.enable_server_reflection(
        [*service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
        server,
    )
    return Health(servicer, service_names)


def check_health(target: str, timeout_s: float = 1.0, service: str = OVERALL) -> bool:
    """Synchronous probe: True when ``target`` answers SERVING within ``timeout_s``."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def start_shutdown_watchdog(deadline_s: float, step: Callable[[], str]) -> threading.Timer:
    """After ``deadline_s``, log ``shutdown_stuck`` with ``step()`` (what the stop is doing) and exit
    the process with ``EXIT_STUCK``. A daemon timer: it covers asyncio.run's own clean-up too, and
    is gone when the process exits normally."""

    def fire() -> None:
        log_event(log, logging.CRITICAL, "shutdown_stuck", step=step(), deadline_s=deadline_s)
        logging.shutdown()
        os._exit(EXIT_STUCK)

    timer = threading.Timer(deadline_s, fire)
    timer.daemon = True
    timer.start()
    return timer
