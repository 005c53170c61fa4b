"""``producer.id.expiration.ms`` (KIP-854) from the broker's settings to its partitions' producer state.

The setting has Kafka's name and default (1 day), comes from a flag, a ``PYKRAFT_`` variable or the
properties file like every broker setting, and is validated. In a ReplicaManager built with it, an
idle producer's state is dropped once its newest batch is that old (never before), while a producer
that keeps writing, or keeps retrying, is never treated as new: its retries stay duplicates even when
the producer has lived far longer than the expiration.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.config import BrokerConfigError, BrokerSettings, config_from, parse_overrides
from broker.replica.replica_manager import ProduceRequestPartition, ReplicaManager
from metadata.records import PartitionChangeRecord
from proto.errors import ErrorCode
from storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from storage.record_batch import build_batch
from tests.unit.broker import test_replica_manager
from tests.unit.broker.test_config_sources import args_for
from tests.unit.broker.test_replica_manager import KEY, TOPIC_ID, Harness

EXPIRATION_MS = 10_000
PID = 77
ENV = "PYKRAFT_PRODUCER_ID_EXPIRATION_MS"


def test_default_is_kafkas() -> None:
    assert BrokerSettings().producer_id_expiration_ms == DEFAULT_PRODUCER_ID_EXPIRATION_MS == 86_400_000


@pytest.mark.parametrize("source", ["flag", "env", "file"])
def test_setting_from_every_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    monkeypatch.delenv(ENV, raising=False)
    extra: list[str] = []
    if source == "flag":
        extra = ["--override", "producer.id.expiration.ms=60000"]
    elif source == "env":
        monkeypatch.setenv(ENV, "60000")
    else:
        path = tmp_path / "server.properties"
        path.write_text("producer.id.expiration.ms=60000\n")
        extra = ["--config-file", str(path)]
    assert config_from(args_for(extra)).settings.producer_id_expiration_ms == 60_000


@pytest.mark.parametrize("value", ["0", "-5", "1d", ""], ids=["zero", "negative", "unit", "empty"])
def test_bad_values_are_refused_naming_the_setting(value: str) -> None:
    with pytest.raises(BrokerConfigError, match=r"producer\.id\.expiration\.ms.*integer >= 1"):
        parse_overrides([f"producer.id.expiration.ms={value}"])


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: Clock) -> Iterator[Harness]:
    """The ReplicaManager harness, every manager built with producer_id_expiration_ms=EXPIRATION_MS
    (the keyword broker.server passes from BrokerSettings) and the test's clock injected."""
    configured = functools.partial(ReplicaManager, producer_id_expiration_ms=EXPIRATION_MS)
    monkeypatch.setattr(test_replica_manager, "ReplicaManager", configured)
    h = Harness(tmp_path, clock_ms=clock)
    yield h
    for manager in h.managers.values():
        manager.close()


def produce(h: Harness, sequence: int, values: list[bytes], epoch: int = 0, broker_id: int = 101):
    answers: dict = {}
    records = build_batch(
        [(None, v, (), 0) for v in values], producer_id=PID, producer_epoch=epoch, base_sequence=sequence
    )
    request = [ProduceRequestPartition(KEY, records, None)]
    h.managers[broker_id].produce(1, 5000, request, h.now_ms, answers.update)
    return answers[KEY]


def test_configured_expiration_reaches_the_partition(harness: Harness) -> None:
    pstate = harness.managers[101].logs[KEY].producer_state
    assert pstate.expiration_ms == EXPIRATION_MS


def test_idle_producer_expires_after_the_configured_time(harness: Harness, clock: Clock) -> None:
    """A probe with a gap (sequence 5) is OUT_OF_ORDER while the state exists (it appends nothing and
    does not refresh the state) and, once the state expired, appended: Kafka accepts any sequence
    from a producer it knows no epoch of, so an idle producer that comes back is not refused (this
    was UNKNOWN_PRODUCER_ID, pre-KIP-360 Kafka's answer, while gRPC could reorder requests). Not
    before the expiration, and within one check interval (a tenth of it) after. The probe's retry is
    then a duplicate answered with its offset, and a bumped epoch from sequence 0 carries on."""
    assert produce(harness, 0, [b"a", b"b"]).code == ErrorCode.NONE
    appended_ms = clock.now_ms
    for idle_ms in (1, EXPIRATION_MS // 2, EXPIRATION_MS - 1):
        clock.now_ms = appended_ms + idle_ms
        assert produce(harness, 5, [b"probe"]).code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, idle_ms
    assert harness.managers[101].logs[KEY].log_end_offset == 2
    clock.now_ms = appended_ms + EXPIRATION_MS + EXPIRATION_MS // 10
    probe = produce(harness, 5, [b"probe"])
    assert (probe.code, probe.base_offset) == (ErrorCode.NONE, 2), probe
    state = harness.managers[101].logs[KEY].producer_state
    assert [(b.first_seq, b.first_offset) for b in state.producers[PID].batches] == [(5, 2)]
    clock.now_ms += 1
    retry = produce(harness, 5, [b"probe"])
    assert (retry.code, retry.base_offset) == (ErrorCode.NONE, 2), retry
    assert harness.managers[101].logs[KEY].log_end_offset == 3
    clock.now_ms += 1  # the producer carries on with a bumped epoch from sequence 0 (KIP-360)
    assert produce(harness, 0, [b"c"], epoch=1).code == ErrorCode.NONE
    assert harness.managers[101].logs[KEY].log_end_offset == 4


def test_live_producer_retry_is_never_treated_as_new(harness: Harness, clock: Clock) -> None:
    """A producer that lives 3.6 x expiration, writing a batch every 1.2 x expiration and retrying
    each 0.6 and 1.2 x expiration after it (each retry refreshes the producer, as a duplicate answered
    from the window does): every retry gets the original offsets and appends nothing."""
    sequence = 0
    for _ in range(3):
        values = [b"%d" % sequence, b"%d" % (sequence + 1)]
        first = produce(harness, sequence, values)
        assert (first.code, first.base_offset) == (ErrorCode.NONE, sequence)
        for _retry in range(2):
            clock.now_ms += EXPIRATION_MS * 6 // 10
            retry = produce(harness, sequence, values)
            assert (retry.code, retry.base_offset) == (ErrorCode.NONE, sequence), retry
        sequence += 2
        clock.now_ms += 1
    assert harness.managers[101].logs[KEY].log_end_offset == sequence


@pytest.mark.parametrize("follower_expired", [False, True], ids=["follower-kept-it", "follower-expired-too"])
def test_follower_reaches_the_leaders_state_after_a_comeback(
    harness: Harness, clock: Clock, follower_expired: bool
) -> None:
    """Expiry runs on each broker's own schedule, so a follower may still hold the producer's old
    window when the leader accepted its comeback batch at sequence 5 (a gap to that window): the
    follower replicating it restarts the window there too, so both hold the same state, and after a
    failover the comeback's retry is still a duplicate answered with its offset."""
    assert produce(harness, 0, [b"a", b"b"]).code == ErrorCode.NONE
    harness.replicate(102)
    assert PID in harness.managers[102].logs[KEY].producer_state.producers
    clock.now_ms += EXPIRATION_MS
    if follower_expired:
        harness.managers[102].log_manager.maybe_expire_producers()
        assert PID not in harness.managers[102].logs[KEY].producer_state.producers
    comeback = produce(harness, 5, [b"comeback"])  # the leader expires the producer first, then appends
    assert (comeback.code, comeback.base_offset) == (ErrorCode.NONE, 2), comeback
    harness.replicate(102)
    leader_entry = harness.managers[101].logs[KEY].producer_state.producers[PID]
    follower_entry = harness.managers[102].logs[KEY].producer_state.producers[PID]
    assert (follower_entry.producer_epoch, follower_entry.batches) == (
        leader_entry.producer_epoch, leader_entry.batches
    )  # fmt: skip
    harness.apply(PartitionChangeRecord(TOPIC_ID, 0, leader=102, isr=(102, 103)))
    retry = produce(harness, 5, [b"comeback"], broker_id=102)
    assert (retry.code, retry.base_offset) == (ErrorCode.NONE, 2), retry
    assert harness.managers[102].logs[KEY].log_end_offset == 3
