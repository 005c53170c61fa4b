"""raft.driver in one process: the API the metadata controller builds on (propose after commit and
apply, ReadIndex, NotLeaderError with a hint, snapshots + compaction, recovery from the data directory).

A single-voter quorum commits on its own, so these run in-process in well under a second each; the
multi-process behaviour is covered by tests/integration/raft/.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from proto import errors
from proto.runtime.listeners import pick_port
from raft.config import parse_voters
from raft.driver import DriverConfig, NotLeaderError, RaftDriver
from raft.messages import NO_NODE
from raft.store import RaftStore


class ListMachine:
    """A state machine that keeps every applied entry (index, data)."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []

    def apply(self, index: int, data: bytes) -> None:
        self.applied.append((index, data))

    def snapshot(self) -> bytes:
        return b"".join(i.to_bytes(8, "big") + len(d).to_bytes(4, "big") + d for i, d in self.applied)

    def restore(self, data: bytes) -> None:
        self.applied, pos = [], 0
        while pos < len(data):
            index, size = (
                int.from_bytes(data[pos : pos + 8], "big"),
                int.from_bytes(data[pos + 8 : pos + 12], "big"),
            )
            self.applied.append((index, data[pos + 12 : pos + 12 + size]))
            pos += 12 + size


def config(tmp_path: Path, voters: str = "", **kwargs: int) -> DriverConfig:
    voters = voters or f"1@127.0.0.1:{pick_port()}"
    return DriverConfig(
        node_id=1, voters=parse_voters(voters), data_dir=tmp_path, election_timeout_ms=60,
        heartbeat_interval_ms=10, propose_timeout_s=5.0, seed=7, **kwargs,
    )  # fmt: skip


async def wait_leader(driver: RaftDriver) -> None:
    for _ in range(500):
        if driver.is_leader:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the single voter did not become leader")


def test_propose_read_index_snapshot_and_recover(tmp_path: Path) -> None:
    """Raft §5.4/§7 + Figure 2: proposals return after commit and apply at consecutive indexes; the
    log is compacted behind snapshots; a restart restores the snapshot and replays the rest."""

    async def scenario() -> list[tuple[int, bytes]]:
        machine = ListMachine()
        driver = RaftDriver(config(tmp_path, snapshot_every_entries=10), machine)
        await driver.start()
        try:
            await wait_leader(driver)
            single = [await driver.propose(f"e{i}".encode()) for i in range(25)]
            batch = await driver.propose_batch([b"b0", b"b1", b"b2"])
            assert single == list(range(single[0], single[0] + 25)), single
            assert batch == [single[-1] + 1, single[-1] + 2, single[-1] + 3]
            assert machine.applied[-1] == (batch[-1], b"b2") and driver.applied_index >= batch[-1]
            assert await driver.read_index() >= batch[-1]
            assert driver.commit_index >= batch[-1] and driver.leader_id == 1 and driver.term >= 1
            with pytest.raises(
                errors.KafkaError, match="INVALID_REQUEST: a proposal needs at least one entry"
            ):
                await driver.propose_batch([])
        finally:
            await driver.stop()
        return machine.applied

    before = asyncio.run(scenario())
    store = RaftStore.open(tmp_path / "raft")
    stored = store.load()
    store.close()
    assert stored.snapshot is not None and stored.snapshot.meta.last_index >= 10
    assert stored.entries and stored.entries[0].index == stored.snapshot.meta.last_index + 1

    async def recover() -> list[tuple[int, bytes]]:
        machine = ListMachine()
        driver = RaftDriver(config(tmp_path, snapshot_every_entries=10), machine)
        await driver.start()
        try:
            await wait_leader(driver)
            await driver.read_index()
        finally:
            await driver.stop()
        return machine.applied

    assert asyncio.run(recover()) == before


def test_follower_refuses_with_not_leader(tmp_path: Path) -> None:
    """A node that is not the leader answers NOT_CONTROLLER (41) with the leader it knows (none here:
    its peers are down), never queues the proposal silently."""

    async def scenario() -> None:
        voters = f"1@127.0.0.1:{pick_port()},2@127.0.0.1:{pick_port()},3@127.0.0.1:{pick_port()}"
        driver = RaftDriver(config(tmp_path, voters), ListMachine())
        await driver.start()
        try:
            with pytest.raises(NotLeaderError) as info:
                await driver.propose(b"x")
            assert info.value.leader_id == NO_NODE and info.value.code == errors.ErrorCode.NOT_CONTROLLER
            with pytest.raises(NotLeaderError):
                await driver.read_index()
            with pytest.raises(NotLeaderError):
                await driver.transfer_leadership(2)
        finally:
            await driver.stop()

    asyncio.run(scenario())
