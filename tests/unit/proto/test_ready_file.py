"""proto.runtime.ready_file: the handshake a node writes for its launcher, outside its log stream."""

from __future__ import annotations

import pytest

from proto.runtime import ready_file
from proto.runtime.ready_file import LISTENING, READY, ReadyFile

BROKER = ReadyFile(101, "broker", 4242, READY, "127.0.0.1:40111", {"PLAINTEXT": "127.0.0.1:40112"},
                   "http://127.0.0.1:40113/metrics")  # fmt: skip


def test_a_written_file_reads_back_whole_and_leaves_no_temporary_file(tmp_path) -> None:
    ready_file.write(tmp_path, BROKER)
    assert ready_file.read(tmp_path) == BROKER
    assert [p.name for p in tmp_path.iterdir()] == [ready_file.READY_FILE]


def test_the_ports_a_launcher_reads() -> None:
    assert (BROKER.port, BROKER.kafka_port(), BROKER.metrics_port) == (40111, 40112, 40113)
    controller = ReadyFile(1, "controller", 7, READY, "127.0.0.1:20001")
    assert (controller.kafka_port(), controller.metrics_port) == (0, None)


@pytest.mark.parametrize(
    ("state", "reached"),
    [(LISTENING, {LISTENING: True, READY: False}), (READY, {LISTENING: True, READY: True})],
    ids=["listening", "ready"],
)
def test_states_are_ordered(state: str, reached: dict[str, bool]) -> None:
    ready = ReadyFile(1, "controller", 7, state, "127.0.0.1:1")
    assert {s: ready.reached(s) for s in ready_file.STATES} == reached


@pytest.mark.parametrize(
    "content",
    ["", "{not json", "[]", '{"node_id": 1}',
     '{"node_id": 1, "role": "broker", "pid": 2, "state": "odd", "listener": "127.0.0.1:1"}'],
    ids=["empty", "not-json", "not-an-object", "missing-fields", "unknown-state"],
)  # fmt: skip
def test_a_file_that_is_not_a_ready_file_reads_as_none(tmp_path, content: str) -> None:
    """The reader keeps waiting (bounded by its deadline) rather than trusting a foreign file."""
    ready_file.path_in(tmp_path).write_text(content)
    assert ready_file.read(tmp_path) is None


def test_no_file_reads_as_none_and_remove_is_idempotent(tmp_path) -> None:
    assert ready_file.read(tmp_path / "missing") is None
    ready_file.write(tmp_path, BROKER)
    ready_file.remove(tmp_path)
    ready_file.remove(tmp_path)
    assert ready_file.read(tmp_path) is None
