"""ReplicaManager + producer state (issue 6): dedup on the leader before append, all or nothing;
followers rebuild the state from replicated batches, so after failover a retry is still a duplicate;
a restarted broker recovers it from its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.replica.replica_manager import ProduceRequestPartition
from metadata.records import PartitionChangeRecord
from proto.errors import ErrorCode
from storage.record_batch import build_batch
from tests.unit.broker.test_replica_manager import KEY, TOPIC_ID, Harness

PID = 5


def idempotent_produce(h: Harness, broker_id: int, sequence: int, values: list[bytes], epoch: int = 0):
    answers: dict = {}
    records = build_batch(
        [(None, v, (), 0) for v in values], producer_id=PID, producer_epoch=epoch, base_sequence=sequence
    )
    h.managers[broker_id].produce(
        1, 5000, [ProduceRequestPartition(KEY, records, None)], h.now_ms, answers.update
    )
    return answers[KEY]


@pytest.fixture
def harness(tmp_path: Path):
    h = Harness(tmp_path)
    yield h
    for manager in h.managers.values():
        manager.close()


def test_duplicate_is_answered_with_the_original_offsets_and_not_appended(harness: Harness) -> None:
    first = idempotent_produce(harness, 101, 0, [b"a", b"b"])
    again = idempotent_produce(harness, 101, 0, [b"a", b"b"])
    assert (first.code, first.base_offset) == (ErrorCode.NONE, 0)
    assert (again.code, again.base_offset) == (ErrorCode.NONE, 0)
    assert harness.managers[101].logs[KEY].log_end_offset == 2


@pytest.mark.parametrize(
    ("sequence", "epoch", "code"),
    [
        (5, 1, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
        (2, 0, ErrorCode.NONE),
        (3, 0, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    ],
    ids=["new-epoch-not-zero", "in-sequence", "gap"],
)
def test_sequence_errors_append_nothing(harness: Harness, sequence: int, epoch: int, code: ErrorCode) -> None:
    idempotent_produce(harness, 101, 0, [b"a", b"b"])
    answer = idempotent_produce(harness, 101, sequence, [b"c"], epoch=epoch)
    assert answer.code == code, answer
    expected_end = 3 if code == ErrorCode.NONE else 2
    assert harness.managers[101].logs[KEY].log_end_offset == expected_end


def test_old_epoch_is_fenced(harness: Harness) -> None:
    idempotent_produce(harness, 101, 0, [b"a"], epoch=1)
    assert idempotent_produce(harness, 101, 1, [b"b"], epoch=0).code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_retry_to_the_new_leader_after_failover_is_a_duplicate(harness: Harness) -> None:
    idempotent_produce(harness, 101, 0, [b"a", b"b"])
    harness.replicate(102)
    harness.apply(PartitionChangeRecord(TOPIC_ID, 0, leader=102, isr=(102, 103)))
    retry = idempotent_produce(harness, 102, 0, [b"a", b"b"])
    assert (retry.code, retry.base_offset) == (ErrorCode.NONE, 0)
    assert harness.managers[102].logs[KEY].log_end_offset == 2


def test_restarted_broker_recovers_producer_state(harness: Harness) -> None:
    idempotent_produce(harness, 101, 0, [b"a"])
    harness.crash(101)
    harness.start(101)
    retry = idempotent_produce(harness, 101, 0, [b"a"])
    assert (retry.code, retry.base_offset) == (ErrorCode.NONE, 0)
    assert harness.managers[101].logs[KEY].log_end_offset == 1
