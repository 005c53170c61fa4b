"""Every server exposes grpc.health.v1 and reflection through proto.serving."""

from __future__ import annotations

import asyncio

import grpc

from proto import serving


def test_health_probe_follows_serving_state() -> None:
    async def scenario() -> list[bool]:
        server = grpc.aio.server(options=serving.GRPC_OPTIONS)
        port = server.add_insecure_port("127.0.0.1:0")
        health = serving.add_standard_services(server, ["pykraft.test.Nothing"])
        await server.start()
        try:
            target = f"127.0.0.1:{port}"
            seen = [await asyncio.to_thread(serving.check_health, target)]
            await health.set_serving(True)
            seen.append(await asyncio.to_thread(serving.check_health, target))
            await health.set_serving(False)
            seen.append(await asyncio.to_thread(serving.check_health, target))
            return seen
        finally:
            await server.stop(None)

    # The servicer starts with the overall service SERVING; NOT_SERVING once we say so.
    assert asyncio.run(scenario()) == [True, True, False]


def test_probe_of_closed_port_is_false() -> None:
    assert serving.check_health("127.0.0.1:1", timeout_s=0.3) is False
