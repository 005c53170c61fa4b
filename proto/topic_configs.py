"""The topic-config catalog: every per-topic setting's name, type, default and bounds, defined once.

Kafka's names and defaults; values travel and are stored as strings, as in Kafka. Three packages
read this one table:

- ``metadata.configs`` validates a topic's overrides and the cluster defaults against it (the
  controller answers ``INVALID_CONFIG`` per resource) and gives every topic its effective value
  (override, else cluster default, else ``default`` here). ``TOPIC_CONFIGS`` are the names a topic may
  override.
- ``storage.config.LogConfig`` takes its fields' defaults and bounds from it (the ``log`` entries,
  dots turned into underscores: ``segment.bytes`` -> ``segment_bytes``).
- ``broker.config`` accepts a broker-wide default for the ``broker_default`` entries
  (``--override min.insync.replicas=2``).

``index.interval.bytes`` is a log setting and a broker default but, as before, no topic override.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigType(enum.Enum):
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    LIST = "list"
    STRING = "string"


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str
    minimum: int | None = None  # for INT/LONG/DOUBLE
    maximum: int | None = None  # for DOUBLE (INT/LONG are bounded by their type)
    choices: frozenset[str] | None = None  # for LIST/STRING: allowed items
    doc: str = ""
    topic: bool = True  # a topic may override it (metadata validates it)
    log: bool = True  # a field of storage's LogConfig
    broker_default: bool = True  # the broker takes a broker-wide default for it


COMPACT = "compact"
DELETE = "delete"
CLEANUP_POLICIES = (COMPACT, DELETE)
COMPRESSION_TYPES = frozenset({"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"})
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)

MIN_SEGMENT_BYTES = 14  # Kafka's lower bound for segment.bytes (LegacyRecord.RECORD_OVERHEAD_V0)
# Offset index positions are stored as int32, so a segment can never be larger than this.
MAX_SEGMENT_BYTES = INT_MAX
UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"

CATALOG: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("min.insync.replicas", ConfigType.INT, "1", 1, doc="ISR size acks=all needs", log=False),
        ConfigDef("retention.ms", ConfigType.LONG, "604800000", -1, doc="-1 keeps data forever"),
        ConfigDef("retention.bytes", ConfigType.LONG, "-1", -1, doc="-1 = no size limit"),
        ConfigDef(
            "segment.bytes", ConfigType.INT, "1073741824", MIN_SEGMENT_BYTES, doc="size of one log segment"
        ),
        ConfigDef("segment.ms", ConfigType.LONG, "604800000", 1, doc="roll a segment after this long"),
        ConfigDef("max.message.bytes", ConfigType.INT, "1048588", 0, doc="largest record batch"),
        ConfigDef("cleanup.policy", ConfigType.LIST, DELETE, choices=frozenset(CLEANUP_POLICIES)),
        ConfigDef(UNCLEAN_LEADER_ELECTION, ConfigType.BOOLEAN, "false", log=False, broker_default=False),
        ConfigDef("flush.messages", ConfigType.LONG, str(LONG_MAX), 1, doc="fsync every N messages"),
        ConfigDef("flush.ms", ConfigType.LONG, str(LONG_MAX), 0, doc="fsync after this long"),
        ConfigDef(
            "compression.type",
            ConfigType.STRING,
            "producer",
            choices=COMPRESSION_TYPES,
            log=False,
            broker_default=False,
        ),
        ConfigDef(
            "message.timestamp.type", ConfigType.STRING, CREATE_TIME, choices=frozenset(TIMESTAMP_TYPES)
        ),
        ConfigDef("delete.retention.ms", ConfigType.LONG, "86400000", 0),
        ConfigDef("min.compaction.lag.ms", ConfigType.LONG, "0", 0),
        ConfigDef("min.cleanable.dirty.ratio", ConfigType.DOUBLE, "0.5", 0, 1, doc="share dirty to clean"),
        ConfigDef("index.interval.bytes", ConfigType.INT, "4096", 0, topic=False),
    )
}
# The names a topic may override (what the controller validates and describes).
TOPIC_CONFIGS: dict[str, ConfigDef] = {name: d for name, d in CATALOG.items() if d.topic}
# The topic configs a broker takes a broker-wide default for (a topic's own setting wins).
BROKER_DEFAULT_KEYS = frozenset(name for name, d in CATALOG.items() if d.broker_default)


def split_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]
