"""Per-partition log configuration, with Kafka's topic-config names and defaults (``proto.topic_configs``).

``LogConfig`` is a frozen dataclass whose fields are Kafka's topic configs with dots turned into
underscores (``segment.bytes`` -> ``segment_bytes``). ``LogConfig.from_properties`` accepts the dotted
names (strings or ints, as an AdminClient or a ``--config k=v`` flag delivers them) and rejects unknown
names or bad values with ``INVALID_CONFIG`` and a message that names the setting.

Unlimited / disabled values are ``None`` here, where Kafka uses -1 or Long.MAX_VALUE:
``retention_bytes=None`` keeps any size, ``retention_ms=None`` keeps forever, ``flush_messages=None`` and
``flush_ms=None`` never fsync on a count or a timer (durability comes from replication, as in Kafka).

Compaction (``storage.cleaner``): ``cleanup.policy`` is a comma-separated list of ``delete`` and
``compact`` (Kafka's values; stored normalized, e.g. ``"compact,delete"``). ``compact`` keeps the last
record per key, ``delete`` applies retention.ms / retention.bytes; a compact-only log never loses
data to retention. ``delete.retention.ms`` keeps tombstones readable that long after the cleaner
first saw them (KIP-534), ``min.cleanable.dirty.ratio`` (a float in [0, 1]) and
``min.compaction.lag.ms`` decide when a log is worth cleaning.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from proto import errors
from proto.topic_configs import (
    CATALOG,
    CLEANUP_POLICIES,
    COMPACT,
    DELETE,
    MAX_SEGMENT_BYTES,
    MIN_SEGMENT_BYTES,
    TIMESTAMP_TYPES,
    ConfigType,
)
from storage.batch_header import HEADER_SIZE

# Kafka encodes "no limit" as -1 in these settings; we turn it into None.
_MINUS_ONE_MEANS_NONE = {"retention_bytes", "retention_ms", "flush_messages", "flush_ms"}


def _default(dotted: str) -> Any:
    """The catalog's default of ``dotted`` as a ``LogConfig`` field holds it (-1 = unlimited is None)."""
    d = CATALOG[dotted]
    if d.type == ConfigType.DOUBLE:
        return float(d.default)
    if d.type in (ConfigType.INT, ConfigType.LONG):
        value = int(d.default)
        return None if value == -1 and dotted.replace(".", "_") in _MINUS_ONE_MEANS_NONE else value
    return d.default


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Topic-level settings of one partition log (Kafka names; defaults from ``proto.topic_configs``)."""

    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    retention_ms: int | None = _default("retention.ms")
    retention_bytes: int | None = _default("retention.bytes")
    index_interval_bytes: int = _default("index.interval.bytes")
    max_message_bytes: int = _default("max.message.bytes")
    flush_messages: int | None = None  # the catalog's Long.MAX_VALUE: never on a count
    flush_ms: int | None = None  # the catalog's Long.MAX_VALUE: never on a timer
    message_timestamp_type: str = _default("message.timestamp.type")
    cleanup_policy: str = _default("cleanup.policy")
    delete_retention_ms: int = _default("delete.retention.ms")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")

    @property
    def compact(self) -> bool:
        """The cleaner keeps the last record per key (``cleanup.policy`` contains ``compact``)."""
        return COMPACT in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """Retention by time and size applies (``cleanup.policy`` contains ``delete``)."""
        return DELETE in self.cleanup_policy.split(",")

    def __post_init__(self) -> None:
        for problem in self._problems():
            raise errors.InvalidConfigError(problem)

    def _problems(self):
        if not MIN_SEGMENT_BYTES <= self.segment_bytes <= MAX_SEGMENT_BYTES:
            yield f"segment.bytes={self.segment_bytes} must be in [{MIN_SEGMENT_BYTES}, {MAX_SEGMENT_BYTES}]"
        if self.segment_ms < 1:
            yield f"segment.ms={self.segment_ms} must be >= 1"
        if self.index_interval_bytes < 0:
            yield f"index.interval.bytes={self.index_interval_bytes} must be >= 0"
        if self.max_message_bytes < HEADER_SIZE:
            yield f"max.message.bytes={self.max_message_bytes} must be >= {HEADER_SIZE} (one batch header)"
        for name in ("retention_ms", "retention_bytes"):
            value = getattr(self, name)
            if value is not None and value < 0:
                yield f"{_dotted(name)}={value} must be >= 0, or -1 for unlimited"
        for name in ("flush_messages", "flush_ms"):
            value = getattr(self, name)
            if value is not None and value < 1:
                yield f"{_dotted(name)}={value} must be >= 1, or -1 to rely on replication"
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            yield f"message.timestamp.type={self.message_timestamp_type!r} must be one of {TIMESTAMP_TYPES}"
        policies = self.cleanup_policy.split(",")
        if any(p not in CLEANUP_POLICIES for p in policies) or len(set(policies)) < len(policies):
            yield (
                f"cleanup.policy={self.cleanup_policy!r} must be a comma-separated list of "
                f"{list(CLEANUP_POLICIES)}, e.g. 'compact' or 'compact,delete'"
            )
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            yield f"min.cleanable.dirty.ratio={self.min_cleanable_dirty_ratio} must be in [0, 1]"
        for name in ("delete_retention_ms", "min_compaction_lag_ms"):
            if getattr(self, name) < 0:
                yield f"{_dotted(name)}={getattr(self, name)} must be >= 0"

    @classmethod
    def from_properties(cls, properties: dict[str, object], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka's dotted names, overriding ``base`` (the broker default) or the defaults."""
        known = {field.name for field in dataclasses.fields(cls)}
        changes: dict[str, Any] = {}  # each value _coerce'd to its field's type
        for dotted, raw in properties.items():
            name = dotted.replace(".", "_")
            if name not in known:
                raise errors.InvalidConfigError(
                    f"unknown log config {dotted!r}; known: {sorted(_dotted(n) for n in known)}"
                )
            changes[name] = _coerce(name, raw)
        return dataclasses.replace(base or cls(), **changes)

    def to_properties(self) -> dict[str, str]:
        """The dotted names and string values (-1 for unlimited), as DescribeConfigs shows them."""
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[_dotted(field.name)] = "-1" if value is None else str(value)
        return out


def _dotted(name: str) -> str:
    return name.replace("_", ".")


def _coerce(name: str, raw: object) -> object:
    if name == "message_timestamp_type":
        return str(raw)
    if name == "cleanup_policy":
        return ",".join(item.strip() for item in str(raw).split(",") if item.strip())
    if name == "min_cleanable_dirty_ratio":
        try:
            return float(str(raw).strip())
        except ValueError:
            raise errors.InvalidConfigError(f"min.cleanable.dirty.ratio={raw!r} is not a number") from None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise errors.InvalidConfigError(f"{_dotted(name)}={raw!r} is not an integer") from None
    if name in _MINUS_ONE_MEANS_NONE and value == -1:
        return None
    return value
