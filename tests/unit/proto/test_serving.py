"""Every server exposes grpc.health.v1 and reflection through proto.runtime.serving."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import grpc

from proto.runtime import serving


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


def test_shutdown_watchdog_exits_a_stuck_process_naming_the_step() -> None:
    """A stop still running at the deadline ends the process with EXIT_STUCK and one log line."""
    code = (
        "import time\n"
        "from proto.runtime.logfmt import configure_logging\n"
        "from proto.runtime.serving import start_shutdown_watchdog\n"
        "configure_logging('INFO', 1, 'controller')\n"
        "start_shutdown_watchdog(0.2, lambda: 'raft driver')\n"
        "time.sleep(30)\n"
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20, cwd=root,
                          check=False)  # fmt: skip
    assert done.returncode == serving.EXIT_STUCK, done.stderr
    assert 'event=shutdown_stuck step="raft driver"' in done.stderr, done.stderr
