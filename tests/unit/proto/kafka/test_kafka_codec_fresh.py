"""The committed ``proto/kafka/messages.py`` equals what ``./dev proto`` generates from the schemas."""

from __future__ import annotations

import difflib

from proto.kafka import generate


def test_generated_kafka_messages_are_fresh() -> None:
    fresh = generate.generate_text()
    committed = generate.OUTPUT.read_text()
    if fresh != committed:
        diff = "".join(
            list(
                difflib.unified_diff(committed.splitlines(True), fresh.splitlines(True), "committed", "fresh")
            )[:40]
        )
        raise AssertionError(f"proto/kafka/messages.py is stale: run ./dev proto and commit\n{diff}")
