"""Compaction's topic configs: the controller's validation (metadata.configs) and the broker's LogConfig.

Kafka's names and defaults: cleanup.policy (a list of delete, compact), delete.retention.ms (1 day),
min.cleanable.dirty.ratio (0.5, a double in [0, 1]), min.compaction.lag.ms (0).
"""

from __future__ import annotations

import pytest

from metadata.configs import validate_config
from proto import errors
from proto.topic_configs import TOPIC_CONFIGS
from storage.config import LogConfig

VALID = [
    ("cleanup.policy", "compact", True, False),
    ("cleanup.policy", "compact,delete", True, True),
    ("cleanup.policy", " delete , compact ", True, True),
    ("cleanup.policy", "delete", False, True),
]


@pytest.mark.parametrize(("name", "value", "compact", "delete"), VALID, ids=[v for _, v, *_ in VALID])
def test_cleanup_policies(name, value, compact, delete) -> None:
    assert validate_config(name, value) is None
    config = LogConfig.from_properties({name: value})
    assert (config.compact, config.delete) == (compact, delete)


INVALID = [
    pytest.param("cleanup.policy", "", "comma-separated list", id="empty-policy"),
    pytest.param("cleanup.policy", "compact,shred", "comma-separated list", id="unknown-policy"),
    pytest.param("min.cleanable.dirty.ratio", "1.5", r"in \[0", id="ratio-above-1"),
    pytest.param("min.cleanable.dirty.ratio", "-0.1", r"in \[0", id="ratio-negative"),
    pytest.param("min.cleanable.dirty.ratio", "half", "number", id="ratio-not-a-number"),
    pytest.param("delete.retention.ms", "-1", ">= 0", id="negative-delete-retention"),
    pytest.param("min.compaction.lag.ms", "-5", ">= 0", id="negative-lag"),
]


@pytest.mark.parametrize(("name", "value", "message"), INVALID)
def test_invalid_values_are_refused_by_the_controller_and_the_broker(name, value, message) -> None:
    problem = validate_config(name, value)
    assert problem is not None and name in problem
    with pytest.raises(errors.InvalidConfigError, match=message):
        LogConfig.from_properties({name: value})


def test_defaults_agree_with_kafka_and_each_other() -> None:
    config = LogConfig()
    assert config.to_properties()["cleanup.policy"] == TOPIC_CONFIGS["cleanup.policy"].default == "delete"
    assert config.delete_retention_ms == int(TOPIC_CONFIGS["delete.retention.ms"].default) == 86_400_000
    assert config.min_cleanable_dirty_ratio == float(TOPIC_CONFIGS["min.cleanable.dirty.ratio"].default)
    assert config.min_compaction_lag_ms == int(TOPIC_CONFIGS["min.compaction.lag.ms"].default) == 0
    assert LogConfig.from_properties({"min.cleanable.dirty.ratio": "0.1"}).min_cleanable_dirty_ratio == 0.1
