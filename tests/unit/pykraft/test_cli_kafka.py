"""pykraft.cli_kafka: how confluent-kafka's answers become the CLI's words.

Rules: a broker's error code raises its ``proto.errors`` class (Kafka's name); librdkafka's own
(negative) codes raise ClientError with librdkafka's name; group states print as Kafka's tool prints
them; librdkafka's log lines go to one logger, silent below the chosen level.
"""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException

from proto import errors
from pykraft import cli_kafka


def test_a_broker_error_raises_its_kafka_error_class() -> None:
    with pytest.raises(errors.KafkaError) as caught:
        cli_kafka._raise_from(KafkaException(KafkaError(68, "group has members")), "DeleteGroups 'g'")
    assert caught.value.code == 68 and type(caught.value).__name__ == "NonEmptyGroupError"
    assert "DeleteGroups 'g': group has members" in caught.value.message


def test_a_librdkafka_error_raises_client_error_with_its_name() -> None:
    with pytest.raises(cli_kafka.ClientError, match=r"_TIMED_OUT \(-185\).*\(ListGroups\)"):
        cli_kafka._raise_from(KafkaException(KafkaError(KafkaError._TIMED_OUT, "Timed out")), "ListGroups")


@pytest.mark.parametrize(
    ("state", "shown"),
    [(ConsumerGroupState.STABLE, "Stable"), (ConsumerGroupState.EMPTY, "Empty"),
     (ConsumerGroupState.DEAD, "Dead"), (ConsumerGroupState.PREPARING_REBALANCING, "PreparingRebalance"),
     (ConsumerGroupState.COMPLETING_REBALANCING, "CompletingRebalance")],
)
def test_group_states_are_kafkas_words(state: ConsumerGroupState, shown: str) -> None:
    assert cli_kafka._state(state) == shown


def test_an_unknown_state_filter_is_refused_before_any_request() -> None:
    admin = cli_kafka.KafkaGroupAdmin("127.0.0.1:1", timeout_s=1.0)
    with pytest.raises(ValueError, match="unknown group state"):
        admin.list_consumer_groups(["Sleeping"])


def test_librdkafka_lines_are_silent_below_the_level() -> None:
    logger = cli_kafka.client_logger("ERROR")
    assert not logger.isEnabledFor(logging.WARNING) and logger.isEnabledFor(logging.ERROR)
    handlers = [h for h in cli_kafka.client_logger("CRITICAL").handlers
                if h.get_name() == cli_kafka.CLIENT_LOG_HANDLER]  # fmt: skip
    assert not logger.propagate and len(handlers) == 1, "one stderr handler, however often it is asked"
    assert cli_kafka.client_logger("nonsense").level == logging.CRITICAL
