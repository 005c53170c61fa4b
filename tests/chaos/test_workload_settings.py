"""The chaos workload's producer settings (tests/chaos/workload.py), without a cluster.

A run on main at 39c6aba found a value written twice around a kill-leader fault, by an idempotent
producer. The broker answered as Kafka does; librdkafka caused it: with several Produce requests in
flight, an OUT_OF_ORDER_SEQUENCE_NUMBER on a later batch (its earlier one refused while a replica
rejoined) makes it bump the producer epoch and renumber every unacknowledged message of every
partition from sequence 0 — also a batch the killed leader had appended and replicated without
answering (confluentinc/librdkafka#4953). One request in flight per connection never produces that
answer, so the workload's producers keep to it.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.chaos.history import History
from tests.chaos.workload import ProducerWorker, TopicState


def worker(**options) -> ProducerWorker:
    return ProducerWorker(0, History(), "127.0.0.1:1", TopicState("t", 1), rate_per_s=1.0, options=options)


def test_idempotent_producers_keep_one_produce_request_in_flight() -> None:
    settings = worker().producer_settings()
    assert settings["enable.idempotence"] is True, settings
    assert settings["acks"] == "all", settings
    assert settings["max.in.flight.requests.per.connection"] == 1, settings


@pytest.mark.parametrize("idempotence", [True, False], ids=["idempotent", "without-idempotence"])
def test_librdkafka_accepts_the_producer_settings(idempotence: bool) -> None:
    """librdkafka checks the combination when the producer is created (no broker is contacted here)."""
    settings = worker(**{"enable.idempotence": idempotence}).producer_settings()
    producer = Producer(settings)
    assert producer.flush(0) == 0
