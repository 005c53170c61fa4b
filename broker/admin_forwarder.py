"""AdminService on a broker's gRPC listener: every call goes to a controller, which forwards it to the
active one (``BrokerServer.forward_admin``), so an admin client needs just one address of any node.

gRPC on a broker carries only this (and health/reflection): the data plane is the Kafka listener.
Each method of ``admin_pb2_grpc.AdminServiceServicer`` is forwarded unchanged; the controller's answer,
or its gRPC error, is the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from proto import admin_pb2_grpc


class AdminForwarder(admin_pb2_grpc.AdminServiceServicer):
    """See the module docstring."""

    def __init__(self, call: Callable[[str, Any], Any]) -> None:
        self._call = call


def _forwarding(method: str):
    async def forward(self: AdminForwarder, request, context: grpc.aio.ServicerContext):
        return await self._call(method, request)

    forward.__name__ = method
    return forward


for _method in admin_pb2_grpc.AdminServiceServicer.__dict__:
    if not _method.startswith("_"):
        setattr(AdminForwarder, _method, _forwarding(_method))
