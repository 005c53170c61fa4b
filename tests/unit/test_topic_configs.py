"""The one topic-config catalog (proto.topic_configs) and its three readers agree."""

from __future__ import annotations

import dataclasses

from broker.config import TOPIC_DEFAULT_KEYS
from metadata.configs import effective_config, validate_config
from proto.topic_configs import CATALOG, LONG_MAX, TOPIC_CONFIGS
from storage.config import LogConfig


def test_log_config_fields_are_the_catalogs_log_entries() -> None:
    fields = {f.name.replace("_", ".") for f in dataclasses.fields(LogConfig)}
    assert fields == {name for name, d in CATALOG.items() if d.log}


def test_log_config_defaults_are_the_catalogs() -> None:
    shown = LogConfig().to_properties()  # -1 = unlimited
    for name, value in shown.items():
        default = CATALOG[name].default
        expected = "-1" if default == str(LONG_MAX) else default
        assert value == expected, name
    # Kafka's own numbers, pinned
    assert LogConfig() == LogConfig(
        segment_bytes=1024**3, segment_ms=7 * 86_400_000, retention_ms=7 * 86_400_000, retention_bytes=None,
        index_interval_bytes=4096, max_message_bytes=1024 * 1024 + 12, flush_messages=None, flush_ms=None,
        message_timestamp_type="CreateTime", cleanup_policy="delete", delete_retention_ms=86_400_000,
        min_cleanable_dirty_ratio=0.5, min_compaction_lag_ms=0,
    )


def test_broker_defaults_are_the_log_settings_and_min_insync_replicas() -> None:
    assert {name for name, d in CATALOG.items() if d.log} | {"min.insync.replicas"} == TOPIC_DEFAULT_KEYS


def test_metadata_validates_and_describes_the_topic_entries() -> None:
    assert set(effective_config({}, {})) == set(TOPIC_CONFIGS)
    assert "index.interval.bytes" not in TOPIC_CONFIGS
    assert validate_config("index.interval.bytes", "10") is not None
    for name, d in TOPIC_CONFIGS.items():
        assert validate_config(name, d.default) is None, name
