"""``pykraft consume --group`` in-process against the fake brokers and fake GroupService.

Rules: the group assigns the partitions; reading starts at the group's committed offsets; each
printed batch is committed right after it is printed (a second run prints only what is new);
--consumer-property takes Kafka's consumer setting names; --group excludes --partition/--offset.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from pykraft import cli_client
from pykraft.cli import build_parser
from pykraft.producer import Producer
from tests.unit.pykraft.fake_brokers import FakeCluster

TOPIC = "lines"
FAST = ["--consumer-property", "session.timeout.ms=1500", "--consumer-property", "heartbeat.interval.ms=100"]


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    fake.group.join_timeout_s = 1.0
    fake.create_topic(TOPIC, 2)
    try:
        yield fake
    finally:
        fake.stop()


def consume(cluster: FakeCluster, *extra: str) -> tuple[int, bytes]:
    args = build_parser().parse_args(["consume", "--bootstrap", cluster.bootstrap, "--topic", TOPIC, *extra])
    out = io.BytesIO()
    return cli_client.run_consume(args, stdout=out), out.getvalue()


def produce(cluster: FakeCluster, values: list[bytes]) -> None:
    with Producer(cluster.bootstrap) as producer:
        for i, value in enumerate(values):
            producer.send(TOPIC, value, partition=i % 2)
        producer.flush(10)


def test_group_consume_commits_what_it_printed(cluster: FakeCluster) -> None:
    produce(cluster, [b"a", b"b", b"c", b"d"])
    code, out = consume(cluster, "--group", "g", "--from-beginning", "--timeout-ms", "1500", *FAST)
    assert code == 0
    assert sorted(out.split()) == [b"a", b"b", b"c", b"d"]
    assert cluster.group.offsets == {("g", TOPIC, 0): 2, ("g", TOPIC, 1): 2}
    produce(cluster, [b"e", b"f"])
    code, out = consume(cluster, "--group", "g", "--from-beginning", "--timeout-ms", "1500", *FAST)
    assert (code, sorted(out.split())) == (0, [b"e", b"f"])


def test_group_consume_stops_at_max_messages_and_commits_only_those(cluster: FakeCluster) -> None:
    produce(cluster, [b"a", b"b", b"c", b"d"])
    code, out = consume(cluster, "--group", "g", "--from-beginning", "--max-messages", "1", *FAST)
    assert code == 0 and len(out.split()) == 1
    assert sum(cluster.group.offsets.values()) == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--group", "g", "--partition", "0"], "--group gets its partitions"),
        (["--consumer-property", "session.timeout.ms=100"], "give --group too"),
        (["--group", "g", "--consumer-property", "nope=1"], "expected KEY=VALUE"),
        (["--group", "g", "--consumer-property", "session.timeout.ms=soon"], "not a valid value"),
    ],
    ids=["partition", "property-without-group", "unknown-property", "bad-value"],
)
def test_group_usage_errors(cluster: FakeCluster, capsys, extra: list[str], message: str) -> None:
    code, _ = consume(cluster, *extra)
    assert code == cli_client.EXIT_USAGE
    assert message in capsys.readouterr().err
