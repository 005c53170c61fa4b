"""Topic configs: the names a topic may override, their types, defaults and valid values.

Kafka's names and defaults. A topic's effective value is its override, else the cluster default
(a ``CLUSTER`` config record), else the built-in default below. ``validate_config`` returns an error
message (``None`` when valid) so that the controller can answer ``INVALID_CONFIG`` per resource.
Values travel and are stored as strings, as in Kafka.
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


class AlterConfigOp(enum.IntEnum):
    """Kafka's IncrementalAlterConfigs operations (numbers as in Kafka)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str
    minimum: int | None = None  # for INT/LONG/DOUBLE
    maximum: int | None = None  # for DOUBLE (INT/LONG are bounded by their type)
    choices: frozenset[str] | None = None  # for LIST/STRING: allowed items
    doc: str = ""


CLEANUP_POLICIES = frozenset({"delete", "compact"})
COMPRESSION_TYPES = frozenset({"producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"})
TIMESTAMP_TYPES = frozenset({"CreateTime", "LogAppendTime"})

TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("min.insync.replicas", ConfigType.INT, "1", 1, doc="ISR size acks=all needs"),
        ConfigDef("retention.ms", ConfigType.LONG, "604800000", -1, doc="-1 keeps data forever"),
        ConfigDef("retention.bytes", ConfigType.LONG, "-1", -1, doc="-1 = no size limit"),
        ConfigDef("segment.bytes", ConfigType.INT, "1073741824", 14, doc="size of one log segment"),
        ConfigDef("segment.ms", ConfigType.LONG, "604800000", 1, doc="roll a segment after this long"),
        ConfigDef("max.message.bytes", ConfigType.INT, "1048588", 0, doc="largest record batch"),
        ConfigDef("cleanup.policy", ConfigType.LIST, "delete", choices=CLEANUP_POLICIES),
        ConfigDef("unclean.leader.election.enable", ConfigType.BOOLEAN, "false"),
        ConfigDef("flush.messages", ConfigType.LONG, str(LONG_MAX), 1, doc="fsync every N messages"),
        ConfigDef("flush.ms", ConfigType.LONG, str(LONG_MAX), 0, doc="fsync after this long"),
        ConfigDef("compression.type", ConfigType.STRING, "producer", choices=COMPRESSION_TYPES),
        ConfigDef("message.timestamp.type", ConfigType.STRING, "CreateTime", choices=TIMESTAMP_TYPES),
        ConfigDef("delete.retention.ms", ConfigType.LONG, "86400000", 0),
        ConfigDef("min.compaction.lag.ms", ConfigType.LONG, "0", 0),
        ConfigDef("min.cleanable.dirty.ratio", ConfigType.DOUBLE, "0.5", 0, 1, doc="share dirty to clean"),
    )
}

UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"


def _validate_number(d: ConfigDef, value: str) -> str | None:
    try:
        number = int(value.strip())
    except ValueError:
        return f"{d.name} must be an integer, got {value!r}"
    upper = INT_MAX if d.type == ConfigType.INT else LONG_MAX
    if d.minimum is not None and number < d.minimum:
        return f"{d.name} must be at least {d.minimum}, got {number}"
    if number > upper:
        return f"{d.name} must be at most {upper}, got {number}"
    return None


def _validate_double(d: ConfigDef, value: str) -> str | None:
    try:
        number = float(value.strip())
    except ValueError:
        return f"{d.name} must be a number, got {value!r}"
    if not (d.minimum is None or number >= d.minimum) or not (d.maximum is None or number <= d.maximum):
        return f"{d.name} must be in [{d.minimum}, {d.maximum}], got {value.strip()}"
    return None


def validate_config(name: str, value: str) -> str | None:
    """None when ``name=value`` is a valid topic config; else a message saying what to fix."""
    d = TOPIC_CONFIGS.get(name)
    if d is None:
        return f"unknown topic config {name!r}; known: {', '.join(sorted(TOPIC_CONFIGS))}"
    if d.type in (ConfigType.INT, ConfigType.LONG):
        return _validate_number(d, value)
    if d.type == ConfigType.DOUBLE:
        return _validate_double(d, value)
    if d.type == ConfigType.BOOLEAN:
        if value.strip().lower() not in ("true", "false"):
            return f"{name} must be true or false, got {value!r}"
        return None
    if d.type == ConfigType.LIST:
        items = split_list(value)
        bad = [i for i in items if d.choices is not None and i not in d.choices]
        if not items or bad:
            return f"{name} must be a comma-separated list of {sorted(d.choices or ())}, got {value!r}"
        return None
    if d.choices is not None and value not in d.choices:
        return f"{name} must be one of {sorted(d.choices)}, got {value!r}"
    return None


def split_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def normalize(name: str, value: str) -> str:
    """The stored form of a valid value (trimmed, booleans lower-case)."""
    d = TOPIC_CONFIGS[name]
    if d.type == ConfigType.BOOLEAN:
        return value.strip().lower()
    if d.type == ConfigType.LIST:
        return ",".join(split_list(value))
    return value.strip()


def effective_config(overrides: dict[str, str], cluster_defaults: dict[str, str]) -> dict[str, str]:
    """Every topic config with its effective value."""
    return {
        name: overrides.get(name, cluster_defaults.get(name, d.default))
        for name, d in sorted(TOPIC_CONFIGS.items())
    }


def config_source(name: str, overrides: dict[str, str], cluster_defaults: dict[str, str]) -> str:
    if name in overrides:
        return "TOPIC"
    if name in cluster_defaults:
        return "CLUSTER_DEFAULT"
    return "DEFAULT"


def apply_op(name: str, op: AlterConfigOp, value: str, current: str | None) -> str | None:
    """The new override after ``op`` (``None`` = no override). ``current`` is the present override."""
    if op == AlterConfigOp.SET:
        return value
    if op == AlterConfigOp.DELETE:
        return None
    base = split_list(current if current is not None else TOPIC_CONFIGS[name].default)
    items = split_list(value)
    if op == AlterConfigOp.APPEND:
        return ",".join(base + [i for i in items if i not in base])
    return ",".join(i for i in base if i not in items)
