"""Per-partition log configuration, with Kafka's topic-config names and defaults.

``LogConfig`` is a frozen dataclass whose fields are Kafka's topic configs with dots turned into
underscores (``segment.bytes`` -> ``segment_bytes``). ``LogConfig.from_properties`` accepts the dotted
names (strings or ints, as an AdminClient or a ``--config k=v`` flag delivers them) and rejects unknown
names or bad values with ``INVALID_CONFIG`` and a message that names the setting.

Unlimited / disabled values are ``None`` here, where Kafka uses -1 or Long.MAX_VALUE:
``retention_bytes=None`` keeps any size, ``retention_ms=None`` keeps forever, ``flush_messages=None`` and
``flush_ms=None`` never fsync on a count or a timer (durability comes from replication, as in Kafka).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from proto import errors
from storage.batch_header import HEADER_SIZE

# Offset index positions are stored as int32, so a segment can never be larger than this.
MAX_SEGMENT_BYTES = 2**31 - 1
MIN_SEGMENT_BYTES = 14  # Kafka's lower bound for segment.bytes (LegacyRecord.RECORD_OVERHEAD_V0)

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)

_DAY_MS = 24 * 60 * 60 * 1000
# Kafka encodes "no limit" as -1 in these settings; we turn it into None.
_MINUS_ONE_MEANS_NONE = {"retention_bytes", "retention_ms", "flush_messages", "flush_ms"}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Topic-level settings of one partition log (Kafka names; defaults are Kafka's)."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * _DAY_MS
    retention_ms: int | None = 7 * _DAY_MS
    retention_bytes: int | None = None
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1024 * 1024 + 12
    flush_messages: int | None = None
    flush_ms: int | None = None
    message_timestamp_type: str = CREATE_TIME

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

    @classmethod
    def from_properties(cls, properties: dict[str, object], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka's dotted names, overriding ``base`` (the broker default) or the defaults."""
        known = {field.name for field in dataclasses.fields(cls)}
        changes: dict[str, object] = {}
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
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise errors.InvalidConfigError(f"{_dotted(name)}={raw!r} is not an integer") from None
    if name in _MINUS_ONE_MEANS_NONE and value == -1:
        return None
    return value
