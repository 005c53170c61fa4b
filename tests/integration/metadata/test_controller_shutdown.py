"""Controllers exit promptly and cleanly on SIGTERM, start after start (``LocalCluster``, as users run).

The bug this guards: a controller occasionally ignored SIGTERM until SIGKILL — its Raft loop survived
the cancel when a message woke it at the same moment (Python 3.11 ``asyncio.wait_for``; see
``tests/unit/raft/test_driver_stop.py`` for the exact race). Traffic makes the window likelier, so a
broker stays connected (heartbeats, a FetchMetadata stream) while the controllers stop one by one, the
active one first (it hands leadership over). Each must exit with status 0 within ``STOP_BOUND_S``.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from pykraft.cli_cluster import active_controller, wait_ready
from pykraft.cluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROUNDS = 3
STOP_BOUND_S = 10.0  # the controller's own watchdog fires at 10 s + two election timeouts (exit 3)
READY_TIMEOUT_S = 60.0
OVERRIDES = {
    "controller.quorum.election.timeout.ms": "300",
    "controller.quorum.heartbeat.interval.ms": "50",
    "broker.session.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "100",
}


def stop_controllers(cluster: LocalCluster, leader_id: int) -> dict[str, tuple[float, int | None]]:
    """SIGTERM each controller in turn (the leader first); name -> (seconds to exit, exit status)."""
    order = sorted(cluster.controller_nodes, key=lambda n: n.node_id != leader_id)
    stopped = {}
    for spec in order:
        sent = time.monotonic()
        cluster.signal_node(spec, signal.SIGTERM)
        cluster.wait_stopped(spec, STOP_BOUND_S)
        stopped[spec.name] = (time.monotonic() - sent, cluster.exit_code(spec))
    return stopped


def test_quorum_stops_within_bound_round_after_round(tmp_path: Path) -> None:
    """Each round: the quorum is ready (leader, broker unfenced), then every controller gets SIGTERM;
    the next round restarts them on their data directories."""
    cluster = LocalCluster(tmp_path, controllers=3, brokers=1, overrides=OVERRIDES)
    try:
        cluster.start()
        for round_ in range(ROUNDS):
            wait_ready(cluster, READY_TIMEOUT_S, progress=None)
            stopped = stop_controllers(cluster, active_controller(cluster))
            bad = {name: f"{s:.1f} s, exit {code}" for name, (s, code) in stopped.items() if code != 0}
            assert not bad, f"round {round_}: not stopped cleanly within {STOP_BOUND_S} s of SIGTERM: {bad}"
            for spec in cluster.controller_nodes:
                cluster.start_node(spec)
    finally:
        for spec in cluster.nodes:
            cluster.kill_node(spec)
