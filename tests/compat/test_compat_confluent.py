"""confluent-kafka 2.16 (librdkafka 2.16) against a real 3 + 3 cluster (issue 15 §4).

- The Producer with acks=all and enable.idempotence=true, once per compression codec: the batches
  reach the log compressed with that codec (read raw from the leader) and read back unchanged.
- A fault test: the partition leader is SIGKILLed while one idempotent acks=all producer writes
  numbered records as fast as it can; every acknowledged record is read back exactly once, in order.
- What is not served yet fails the way docs/compatibility.md says: a transactional producer gets the
  fatal TRANSACTIONAL_ID_AUTHORIZATION_FAILED naming its transactional id, a SASL client is told the
  broker has no SASL handshake; kafka-python gets the same two errors in its own words.
- The README's confluent-kafka example runs as written against this cluster.

Groups (a group of 3 with rebalances on join and leave, commit/committed, seek, offsets_for_times) and
the AdminClient (create/delete topics, create partitions, describe/alter configs, list topics, list and
describe groups) are covered by tests/integration/kafka/test_groups.py and test_admin.py with the same
client; the group that mixes clients is in test_compat_groups.py. Every process is stopped by pid when
the module ends, even on failure (``running_cluster``).
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from storage.compression import CompressionType
from tests.compat.clients import DEADLINE_S, Out, read_confluent, write_confluent
from tests.integration.broker.broker_cluster import BrokerCluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
ATTRIBUTES_AT = 21  # baseOffset 8, batchLength 4, partitionLeaderEpoch 4, magic 1, crc 4
COMPRESSION_MASK = 0x07


def batch_codecs(records: bytes) -> list[int]:
    """The compression codec (attributes & 7) of every batch in a raw RecordBatch buffer."""
    codecs, position = [], 0
    while position + ATTRIBUTES_AT + 2 <= len(records):
        (length,) = struct.unpack_from(">i", records, position + 8)
        (attributes,) = struct.unpack_from(">h", records, position + ATTRIBUTES_AT)
        codecs.append(attributes & COMPRESSION_MASK)
        position += 12 + length
    return codecs


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_idempotent_acks_all_producer_with_each_codec(codec: str, compat_cluster: BrokerCluster) -> None:
    topic = f"codec-{codec}"
    compat_cluster.create_topic(topic, partitions=1, min_insync_replicas="2")
    bootstrap = compat_cluster.cluster.kafka_bootstrap
    # Compressible values: librdkafka sends a batch uncompressed when compression does not shrink it.
    sent = [Out(0, b"key-%d" % i, b"compressible %d " % i + b"abcdefgh" * 40) for i in range(500)]
    acked = write_confluent(bootstrap, topic, sent, **{"compression.type": codec, "linger.ms": 20})
    assert [(r.offset, r.value) for r in acked] == [(i, r.value) for i, r in enumerate(sent)]
    raw = compat_cluster.fetch(compat_cluster.leader(topic), topic, 0, max_bytes=16 << 20).records
    expected = CompressionType[codec.upper()].value
    assert set(batch_codecs(raw)) == {expected}, f"batches in the log are not all {codec}"
    assert read_confluent(bootstrap, topic, 1, len(sent)) == acked


class NumberedProducer:
    """Produces b"%08d" % n (acks=all, idempotent) until stopped; remembers what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": int(DEADLINE_S * 1000)})  # fmt: skip
        self.topic = topic
        self.sent = 0
        self.acked: list[int] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="numbered-producer", daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked.append(int(msg.value()))
        else:
            self.failures.append(str(err))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, value=b"%08d" % self.sent, on_delivery=self._on_delivery)
            except BufferError:  # the local queue is full while the leader moves: wait for acks
                self.producer.poll(0.05)
                continue
            self.sent += 1
            self.producer.poll(0.001)

    def __enter__(self) -> NumberedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_S)
        assert self.producer.flush(DEADLINE_S) == 0, "records still unacknowledged after the deadline"


def test_production_across_a_leader_sigkill_loses_and_duplicates_nothing(
    compat_cluster: BrokerCluster,
) -> None:
    """Fault: SIGKILL of the partition leader mid-production. Load: one confluent-kafka producer
    (acks=all, enable.idempotence=true) writing numbered records as fast as it can to a 1-partition
    topic, RF 3, min.insync.replicas=2. Check: the producer reports no failure, and the log holds
    every number sent exactly once, in order (so nothing acknowledged was lost or duplicated)."""
    topic = "sigkill"
    compat_cluster.create_topic(topic, partitions=1, min_insync_replicas="2")
    old_leader = compat_cluster.leader(topic)
    victim = compat_cluster.broker(old_leader)
    try:
        with NumberedProducer(compat_cluster.cluster.kafka_bootstrap, topic) as load:
            wait_for(lambda: len(load.acked) > 2000, DEADLINE_S, "2,000 acks before the fault")
            compat_cluster.cluster.kill_node(victim)
            acked_at_kill = len(load.acked)
            new_leader = compat_cluster.leader(topic)
            assert new_leader != old_leader
            wait_for(lambda: len(load.acked) > acked_at_kill + 2000, DEADLINE_S, "2,000 acks after the fault")
        assert not load.failures, load.failures[:5]
        assert sorted(load.acked) == list(range(load.sent)), "not every record sent was acknowledged once"
        read = read_confluent(compat_cluster.cluster.kafka_bootstrap, topic, 1, load.sent)
        assert [r.offset for r in read] == list(range(load.sent))
        assert [int(r.value) for r in read] == list(range(load.sent)), "lost, duplicated or reordered"
    finally:  # the rest of the module wants three brokers
        if not compat_cluster.cluster.is_running(victim):
            compat_cluster.cluster.start_node(victim)
    compat_cluster.wait_isr(topic, {101, 102, 103}, timeout_s=DEADLINE_S)


def test_not_yet_served_features_fail_with_the_documented_error(compat_cluster: BrokerCluster) -> None:
    """docs/compatibility.md quotes these errors: keep them true."""
    bootstrap = compat_cluster.cluster.kafka_bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "compat-tx"})
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(DEADLINE_S)
    error = raised.value.args[0]
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED and error.fatal()
    assert "transactional id 'compat-tx': transactions are not supported by this cluster yet" in error.str()

    for security, line in [
        ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
          "sasl.password": "p"}, "SASL Handshake not supported by broker (required by mechanism PLAIN)"),
        ({"security.protocol": "SSL"}, "connecting to a PLAINTEXT broker listener?"),
    ]:  # fmt: skip
        logs: list[str] = []
        admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _Collect(logs), **security})
        with pytest.raises(KafkaException) as raised:
            admin.list_topics(timeout=5)
        assert raised.value.args[0].code() == KafkaError._TRANSPORT
        # librdkafka hands its log lines to the ``logger`` when the client is polled.
        wait_for(lambda a=admin, lines=logs, want=line: a.poll(0.2) is not None
                 and any(want in x for x in lines), DEADLINE_S, f"the log line {line!r}")  # fmt: skip

    code = (
        "import sys\n"
        "from kafka import KafkaProducer\n"
        "from kafka.errors import TransactionalIdAuthorizationFailedError, IncompatibleBrokerVersion\n"
        "servers = sys.argv[1].split(',')\n"
        "try:\n"
        "    KafkaProducer(bootstrap_servers=servers, transactional_id='kp-tx').init_transactions()\n"
        "except TransactionalIdAuthorizationFailedError as e:\n"
        "    print('TXN', e)\n"
        "try:\n"
        "    KafkaProducer(bootstrap_servers=servers, security_protocol='SASL_PLAINTEXT',\n"
        "                  sasl_mechanism='PLAIN', sasl_plain_username='u', sasl_plain_password='p',\n"
        "                  max_block_ms=10000).send('t', b'x').get(10)\n"
        "except IncompatibleBrokerVersion as e:\n"
        "    print('SASL', e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, bootstrap], capture_output=True, text=True,
                            timeout=DEADLINE_S * 2, check=False)  # fmt: skip
    assert "TXN [Error 53] TransactionalIdAuthorizationFailedError" in result.stdout, result.stderr[-2000:]
    assert ("SASL [Error 35] IncompatibleBrokerVersion: Kafka broker does not support the "
            "'SaslHandshakeRequest' Kafka protocol.") in result.stdout, result.stderr[-2000:]  # fmt: skip


class _Collect:
    """A ``logging.Logger`` stand-in for librdkafka's ``logger`` setting: keeps each line."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def log(self, _level: int, fmt: str, *args: object) -> None:
        self.lines.append(fmt % args if args else fmt)


def readme_confluent_example() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"With confluent-kafka.*?```python\n(.*?)```", text, re.S)
    assert match, "README.md has no ```python block after 'With confluent-kafka'"
    return match.group(1)


def test_readme_confluent_kafka_example_runs(compat_cluster: BrokerCluster) -> None:
    """The README's confluent-kafka example, run as written with KAFKA_BOOTSTRAP set to this
    cluster's Kafka listeners (as ``pykraft cluster up`` prints it)."""
    env = {**os.environ, "KAFKA_BOOTSTRAP": compat_cluster.cluster.kafka_bootstrap}
    result = subprocess.run([sys.executable, "-c", readme_confluent_example()], capture_output=True,
                            text=True, timeout=DEADLINE_S * 2, cwd=ROOT, env=env, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "payments 0 0 b'alice' b'42'" in result.stdout, result.stdout
