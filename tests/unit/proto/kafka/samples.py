"""Sample messages for the codec tests, built from the schema model (``proto.kafka.schema``).

``build(struct, version, mode, rng, classes)`` fills every field present in ``version`` with a value
that differs from its default (mode ``full``), or sets every field nullable in that version to null
and leaves tagged fields at their defaults (mode ``nulls``). ``to_plain`` turns a message into
nested dicts/lists with bytes and UUIDs, for comparing across codecs.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from typing import Any

from proto.kafka.schema import FIXED, INT_RANGES, Field, Struct

MODES = ("full", "nulls")


def build(s: Struct, v: int, mode: str, rng: random.Random, classes: dict[str, type]) -> Any:
    values = {}
    for f in s.fields:
        if not f.present(v):
            continue
        if mode == "nulls" and f.is_tagged(v):
            continue
        values[f.name] = value_for(f, v, mode, rng, classes)
    return classes[s.class_name](**values)


def value_for(f: Field, v: int, mode: str, rng: random.Random, classes: dict[str, type]) -> Any:
    if mode == "nulls" and f.is_nullable(v):
        return None
    if f.is_array:
        count = rng.randint(1, 3)
        return [element_value(f, v, mode, rng, classes) for _ in range(count)]
    return element_value(f, v, mode, rng, classes)


def element_value(f: Field, v: int, mode: str, rng: random.Random, classes: dict[str, type]) -> Any:
    if f.struct is not None:
        return build(f.struct, v, mode, rng, classes)
    t = f.element
    default = f.default if f.has_default and not f.is_array else None
    if t == "bool":
        return not default if isinstance(default, bool) else True
    if t in INT_RANGES:
        low, high = INT_RANGES[t]
        while True:
            value = rng.choice([rng.randint(low, high), rng.randint(1, min(high, 1000)), high, low])
            if value not in (default, 0):
                return value
    if t == "float64":
        return rng.random() * 1e6 + 1.5
    if t == "uuid":
        return uuid.UUID(int=rng.getrandbits(128) | 1)
    if t == "string":
        return f"{f.name}-é-{rng.randint(0, 10**6)}"
    if t in ("bytes", "records"):
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 40)))
    raise AssertionError(f"no sample for type {t}")


def to_plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [to_plain(x) for x in obj]
    if isinstance(obj, memoryview | bytearray):
        return bytes(obj)
    return obj


__all__ = ["FIXED", "MODES", "build", "to_plain"]
