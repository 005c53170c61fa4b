"""The metadata state machine under the Raft driver: replay, the FetchMetadata tail, snapshots."""

from __future__ import annotations

import asyncio
import random

from metadata.controller import ControllerConfig, QuorumController
from metadata.records import PartitionRecord, RegisterBrokerRecord, TopicRecord, encode_batch
from metadata.state_machine import MetadataStateMachine


def machine(max_tail_entries: int = 100) -> MetadataStateMachine:
    return MetadataStateMachine(QuorumController(ControllerConfig(), random.Random(1)), max_tail_entries)


def test_apply_replays_and_keeps_the_tail() -> None:
    """apply(index, data) replays the batch at offset = index; the tail keeps the committed bytes
    (with gaps where Raft had no-op entries)."""
    sm = machine()
    first = encode_batch([RegisterBrokerRecord(1, "a")])
    second = encode_batch([TopicRecord("t", "id"), PartitionRecord("id", 0, (1,), (1,), 1)])
    sm.apply(3, first)
    sm.apply(5, second)
    assert sm.offset == 5 and sm.controller.image.brokers[1].broker_epoch == 3
    assert sm.entries_after(0, 10, 1 << 20) == [(3, first), (5, second)]
    assert sm.entries_after(3, 10, 1 << 20) == [(5, second)]
    assert sm.entries_after(4, 10, 1 << 20) == [(5, second)]
    assert sm.entries_after(0, 10, 1) == [(3, first)], "the byte limit keeps at least one entry"


def test_tail_is_bounded_and_older_readers_need_a_snapshot() -> None:
    """Past max_tail_entries the oldest entries go; a reader behind them is not covered."""
    sm = machine(max_tail_entries=2)
    for index in range(1, 5):
        sm.apply(index, b"")
    assert [o for o, _ in sm.entries_after(0, 10, 1 << 20)] == [3, 4]
    assert not sm.covers(1) and sm.covers(2)


def test_restore_replaces_the_image_and_resets_the_tail() -> None:
    source = machine()
    source.apply(7, encode_batch([RegisterBrokerRecord(1, "a")]))
    sm = machine()
    sm.apply(1, b"")
    sm.restore(source.snapshot())
    assert sm.offset == 7 and sm.controller.image.brokers[1].broker_epoch == 7
    assert sm.tail_start_offset == 7 and sm.entries_after(0, 10, 1 << 20) == []
    assert not sm.covers(0)


def test_own_proposal_is_replayed_without_decoding() -> None:
    """The active controller's own entry replays the records it generated (equal bytes)."""
    sm = machine()
    records = (RegisterBrokerRecord(1, "a"),)
    data = encode_batch(records)
    sm.expect(data, records)
    sm.apply(2, bytes(bytearray(data)))  # equal bytes, another object
    assert sm.controller.image.brokers[1].incarnation_id == "a"
    assert sm._own is None


def test_waiters_wake_on_apply() -> None:
    async def scenario() -> float:
        sm = machine()
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, sm.apply, 1, b"")
        start = loop.time()
        await sm.wait_for_entries_after(0, timeout_s=5)
        return loop.time() - start

    assert asyncio.run(scenario()) < 1
