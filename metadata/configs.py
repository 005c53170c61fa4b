"""Topic configs on the controller: validation, effective values and IncrementalAlterConfigs' operations.

The names a topic may override, their types, defaults and valid values are the catalog in
``proto.topic_configs``. A topic's effective value is its override, else the cluster default (a
``CLUSTER`` config record), else the catalog's default. ``validate_config`` returns an error message
(``None`` when valid) so that the controller can answer ``INVALID_CONFIG`` per resource. Values
travel and are stored as strings, as in Kafka.
"""

from __future__ import annotations

import enum

from proto.topic_configs import INT_MAX, LONG_MAX, TOPIC_CONFIGS, ConfigDef, ConfigType, split_list


class AlterConfigOp(enum.IntEnum):
    """Kafka's IncrementalAlterConfigs operations (numbers as in Kafka)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


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
