"""Crash recovery with a real broker process: what was written under a larger max.message.bytes
survives an unclean restart after the limit was lowered (issue 14, defect 2); the HW checkpoint —
written every few seconds in the broker's checkpoint thread (``broker.replica.checkpoint_writer``) and at a
graceful stop — is on disk and read back by the restarted broker.

Kafka's ``LogSegment.recover`` checks the structure of what is on disk only (CRC, offsets, sizes within
the segment); a topic config never decides what is corrupt. Before the fix recovery cut the segment at
the first batch larger than the topic's *current* limit and deleted every later segment.

The broker is killed with SIGKILL (no clean-shutdown marker, so its logs are scanned on restart); the
page cache keeps what it wrote, as after any process crash.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_cluster import BrokerCluster, running_cluster, wait_for

from proto.errors import ErrorCode
from storage.checkpoint import OffsetCheckpoint
from storage.log_loader import CLEAN_SHUTDOWN_FILE, HIGH_WATERMARK_FILE

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "lowered-limit"
BROKER = 101
BIG_VALUE_BYTES = 900_000
OLD_LIMIT, NEW_LIMIT = "1048588", "500000"  # Kafka's default (1 MiB + 12), then about half
HW_TOPIC = "hw-checkpoint"
CHECKPOINT_WAIT_S = 30  # replica.high.watermark.checkpoint.interval.ms is 5 s; a loaded machine is slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    data_dir = Path(tmp_path_factory.mktemp("broker-recovery"))
    with running_cluster(data_dir, brokers=1) as bc:
        yield bc


def test_unclean_restart_keeps_batches_larger_than_the_lowered_limit(cluster: BrokerCluster) -> None:
    """A 900 KB batch written under a 1 MB max.message.bytes, the limit lowered to 500 KB, the broker
    SIGKILLed: on restart that batch and everything after it are still there."""
    cluster.create_topic(TOPIC, rf=1, max_message_bytes=OLD_LIMIT, segment_bytes=str(2 * BIG_VALUE_BYTES))
    values = [b"before", b"B" * BIG_VALUE_BYTES, b"after-1", b"C" * BIG_VALUE_BYTES, b"after-2"]
    for offset, value in enumerate(values):
        produced = cluster.produce(BROKER, TOPIC, [value])
        assert (produced.code, produced.base_offset) == (ErrorCode.NONE, offset), produced
    cluster.admin.alter_configs("topic", TOPIC, [("max.message.bytes", "set", NEW_LIMIT)])

    def lowered() -> bool:  # the broker applied the new limit: a 600 KB batch is refused now
        probe = cluster.produce(BROKER, TOPIC, [b"P" * 600_000])
        assert probe.code in (ErrorCode.NONE, ErrorCode.MESSAGE_TOO_LARGE), probe
        if probe.code == ErrorCode.NONE:
            values.append(b"P" * 600_000)
        return probe.code == ErrorCode.MESSAGE_TOO_LARGE

    wait_for(lowered, 20, f"max.message.bytes={NEW_LIMIT} applied on the broker")
    before = cluster.read_all(BROKER, TOPIC)
    assert [v for _, v in before] == values

    cluster.cluster.kill_node(cluster.broker(BROKER))
    cluster.cluster.start_node(cluster.broker(BROKER))
    assert cluster.leader(TOPIC, timeout_s=45) == BROKER
    wait_for(lambda: cluster.high_watermark(BROKER, TOPIC) == len(values), 20, "the HW back at the LEO")
    assert cluster.read_all(BROKER, TOPIC) == before, "recovery dropped data written under the old limit"


def hw_checkpoint_dir(cluster: BrokerCluster) -> Path:
    return cluster.cluster.data_dir / f"broker-{BROKER}" / f"{HW_TOPIC}-0"


def hw_checkpoint(cluster: BrokerCluster) -> int | None:
    return OffsetCheckpoint(hw_checkpoint_dir(cluster) / HIGH_WATERMARK_FILE).read()


def produce_in_order(cluster: BrokerCluster, values: list[bytes], first_offset: int) -> None:
    for offset, value in enumerate(values, start=first_offset):
        produced = cluster.produce(BROKER, HW_TOPIC, [value])
        assert (produced.code, produced.base_offset) == (ErrorCode.NONE, offset), produced


def test_the_hw_checkpoint_is_written_while_running_and_at_stop_and_read_back(cluster: BrokerCluster) -> None:
    """The periodic checkpoint reaches the disk while the broker serves (written in its worker thread);
    a SIGKILLed broker restarts with it; a graceful stop writes the final HW before the process exits;
    no checkpoint write failed on the way."""
    spec = cluster.broker(BROKER)
    cluster.create_topic(HW_TOPIC, rf=1)
    produce_in_order(cluster, [b"a", b"b", b"c"], 0)
    wait_for(lambda: hw_checkpoint(cluster) == 3, CHECKPOINT_WAIT_S, "the periodic HW checkpoint at 3")

    cluster.cluster.kill_node(spec)
    assert hw_checkpoint(cluster) == 3
    cluster.cluster.start_node(spec)
    assert cluster.leader(HW_TOPIC, timeout_s=45) == BROKER
    wait_for(lambda: cluster.high_watermark(BROKER, HW_TOPIC) == 3, 20, "the HW back at 3")
    assert [v for _, v in cluster.read_all(BROKER, HW_TOPIC)] == [b"a", b"b", b"c"]

    produce_in_order(cluster, [b"d", b"e"], 3)  # acks=all on RF 1: the HW is 5 when answered
    assert cluster.cluster.stop_node(spec, timeout_s=30.0), "the broker did not stop gracefully"
    assert hw_checkpoint(cluster) == 5, "the final HW checkpoint was not written at stop"
    assert (hw_checkpoint_dir(cluster) / CLEAN_SHUTDOWN_FILE).exists()
    assert "checkpoint_write_failed" not in cluster.cluster.log_path(spec).read_text(errors="replace")
    cluster.cluster.start_node(spec)
    assert cluster.leader(HW_TOPIC, timeout_s=45) == BROKER
    wait_for(lambda: cluster.high_watermark(BROKER, HW_TOPIC) == 5, 20, "the HW back at 5")
