"""``pykraft produce`` / ``pykraft consume`` in-process against the fake BrokerService.

Rules: every stdin line becomes one record (split at --key-separator), exit 0 once all are
acknowledged; consume prints values (with --print-offsets / --print-key prefixes), stops at
--max-messages or --timeout-ms; usage errors exit 2 with a message and send nothing further.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from pykraft import cli_client
from pykraft.cli import build_parser
from tests.unit.pykraft.fake_brokers import FakeCluster

TOPIC = "lines"


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster()
    fake.create_topic(TOPIC, 2)
    try:
        yield fake
    finally:
        fake.stop()


def produce(cluster: FakeCluster, stdin: bytes, *extra: str) -> int:
    args = build_parser().parse_args(["produce", "--bootstrap", cluster.bootstrap, "--topic", TOPIC, *extra])
    return cli_client.run_produce(args, stdin=io.BytesIO(stdin))


def consume(cluster: FakeCluster, *extra: str) -> tuple[int, bytes]:
    args = build_parser().parse_args(["consume", "--bootstrap", cluster.bootstrap, "--topic", TOPIC, *extra])
    out = io.BytesIO()
    return cli_client.run_consume(args, stdout=out), out.getvalue()


def test_round_trip_with_keys_and_offsets(cluster: FakeCluster) -> None:
    assert produce(cluster, b"k1:v1\nk2:v2\r\nk1:v3", "--key-separator", ":", "--compression", "zstd") == 0
    code, out = consume(cluster, "--from-beginning", "--max-messages", "3", "--print-offsets", "--print-key",
                        "--key-separator", "=")  # fmt: skip
    assert code == 0
    lines = sorted(out.decode().splitlines())
    by_key = {line.split("\t")[1].split("=")[0] for line in lines}
    assert by_key == {"k1", "k2"}
    k1 = [line for line in lines if "\tk1=" in line]
    assert [line.split("=")[1] for line in k1] == ["v1", "v3"], "one key, one partition, in order"


def test_partition_and_offset(cluster: FakeCluster) -> None:
    assert produce(cluster, b"a\nb\nc\n", "--partition", "1") == 0
    code, out = consume(cluster, "--partition", "1", "--offset", "1", "--timeout-ms", "500")
    assert (code, out) == (0, b"b\nc\n")


def test_without_from_beginning_only_new_records_are_read(cluster: FakeCluster) -> None:
    assert produce(cluster, b"old\n", "--partition", "0") == 0
    code, out = consume(cluster, "--partition", "0", "--timeout-ms", "300")
    assert (code, out) == (0, b"")


@pytest.mark.parametrize(
    ("command", "extra", "stdin"),
    [
        ("produce", ["--key-separator", ":"], b"k:v\nno-separator\n"),
        ("consume", ["--offset", "3"], b""),
        ("consume", ["--partition", "9"], b""),
        ("consume", ["--partition", "0", "--offset", "x"], b""),
    ],
    ids=["missing-separator", "offset-without-partition", "no-such-partition", "bad-offset"],
)
def test_usage_errors_exit_2(cluster: FakeCluster, command: str, extra: list[str], stdin: bytes) -> None:
    if command == "produce":
        assert produce(cluster, stdin, *extra) == cli_client.EXIT_USAGE
    else:
        assert consume(cluster, *extra)[0] == cli_client.EXIT_USAGE

