"""Cross-check of the generated codec against kafka-python 3.0.12's protocol classes.

kafka-python encodes the same messages from Kafka's own message specs with a separate codec. For
every API and version both serve: the bytes we encode decode with theirs and re-encode to the same
bytes, and bytes they encode from the same message decode with ours to an equal message.
"""

from __future__ import annotations

import dataclasses
import importlib
import random
import uuid
from typing import Any

import pytest
from kafka.protocol.api_message import ApiMessage

from proto.kafka import generate, messages
from proto.kafka.codec import decode_body
from proto.kafka.schema import Message
from tests.unit.proto.kafka.samples import MODES, build

APIS = generate.load_apis()
CLASSES = {name: obj for name, obj in vars(messages).items() if isinstance(obj, type)}
# our field name -> kafka-python's, where names differ: our schema names a field for the versions we
# serve (GenerationIdOrMemberEpoch is the generation id up to v8), kafka-python renames bitfields
ALIASES = {
    "generation_id": "generation_id_or_member_epoch",
    "cluster_authorized_operations": "authorized_operations",
    "topic_authorized_operations": "authorized_operations",
}
BIT_31 = 31  # kafka-python reads an authorized-operations bitfield of only bit 31 (INT32_MIN) as None


def bits_to_set(value: int) -> set[int] | None:
    """kafka-python keeps ``*_authorized_operations`` bitfields as sets of bit numbers."""
    bits = {i for i in range(32) if (value >> i) & 1}
    return None if bits == {BIT_31} else bits


def is_bitfield(name: str) -> bool:
    return name.endswith("authorized_operations") and not name.startswith("include_")


def set_to_bits(bits: set[int] | None) -> int:
    value = sum(1 << i for i in ({BIT_31} if bits is None else bits))
    return value - (1 << 32) if value >= 1 << 31 else value


def kafka_python_classes() -> dict[tuple[int, str], type]:
    found = {}
    for name in ("consumer", "metadata", "producer", "admin"):
        module = importlib.import_module(f"kafka.protocol.{name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, ApiMessage) and obj is not ApiMessage and obj._json:
                found[(obj.API_KEY, obj.type)] = obj
    return found


THEIRS = kafka_python_classes()
CASES = [
    pytest.param(api.api_key, message, v, mode, id=f"{api.name}{message.side}-v{v}-{mode}")
    for api in APIS
    for message in (api.request, api.response)
    if (api.api_key, message.side.lower()) in THEIRS
    for v in message.versions
    if v <= THEIRS[(api.api_key, message.side.lower())].max_version
    for mode in MODES
]


def sample(api_key: int, message: Message, v: int, mode: str) -> Any:
    obj = build(message.root, v, mode, random.Random(f"compat/{message.root.class_name}/{v}/{mode}"), CLASSES)
    if message.root.class_name == "ApiVersionsResponse":
        obj.error_code = (
            0  # with any error kafka-python reads the v0 body (KIP-511); tested in test_kafka_api
        )
    return obj


def their_name(ours: str, their_fields: Any) -> str | None:
    if ours in their_fields:
        return ours
    alias = ALIASES.get(ours)
    return alias if alias in their_fields else None


def assert_same(ours: Any, theirs: Any, path: str) -> None:
    """Our message equals kafka-python's in every field of the version kafka-python decoded."""
    if hasattr(theirs, "to_dict"):
        assert dataclasses.is_dataclass(ours), path
        names = {their_name(f.name, theirs.to_dict(json=False)): f.name for f in dataclasses.fields(ours)}
        for their_field in theirs.to_dict(json=False):
            assert their_field in names, f"{path}.{their_field}: no field of ours maps to it"
            ours_field = names[their_field]
            value = getattr(theirs, their_field)
            if is_bitfield(their_field):
                value = set_to_bits(value)
            assert_same(getattr(ours, ours_field), value, f"{path}.{ours_field}")
    elif theirs is None and dataclasses.is_dataclass(ours):
        assert ours == type(ours)(), f"{path}: kafka-python read no tagged struct, ours is {ours}"
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), path
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(a, b, f"{path}[{i}]")
    else:
        mine = bytes(ours) if isinstance(ours, memoryview | bytearray) else ours
        assert mine == theirs, f"{path}: ours {mine!r} != kafka-python {theirs!r}"


def to_theirs(obj: Any, their_cls: type, version: int | None) -> Any:
    """Build kafka-python's message from ours, nested structs included."""
    values = {}
    names = {their_name(f.name, their_cls.fields): f.name for f in dataclasses.fields(obj)}
    for name, field in their_cls.fields.items():
        if name not in names:
            continue
        value = getattr(obj, names[name])
        if is_bitfield(name):
            value = bits_to_set(value)
        elif value is not None and (field.is_struct() or field.is_struct_array()):
            if field.is_struct_array():
                value = [to_theirs(item, field.data_class, None) for item in value]
            else:
                value = to_theirs(value, field.data_class, None)
        elif isinstance(value, memoryview):
            value = bytes(value)
        values[name] = value
    return their_cls[version](**values) if version is not None else their_cls(**values)


@pytest.mark.parametrize(("api_key", "message", "version", "mode"), CASES)
def test_our_bytes_decode_with_kafka_python(api_key: int, message: Message, version: int, mode: str) -> None:
    obj = sample(api_key, message, version, mode)
    out = bytearray()
    getattr(messages, f"{message.side.upper()}_ENCODERS")[api_key][version](out, obj)
    their_cls = THEIRS[(api_key, message.side.lower())]
    decoded = their_cls.decode(bytes(out), version=version)
    assert_same(obj, decoded, message.root.class_name)
    decoded._header = None  # kafka-python's decode(header=False) leaves the slot unset; encode reads it
    assert decoded.encode(version=version) == bytes(out), "kafka-python re-encodes our bytes differently"


@pytest.mark.parametrize(("api_key", "message", "version", "mode"), CASES)
def test_kafka_python_bytes_decode_with_ours(api_key: int, message: Message, version: int, mode: str) -> None:
    obj = sample(api_key, message, version, mode)
    their_cls = THEIRS[(api_key, message.side.lower())]
    data = to_theirs(obj, their_cls, version).encode(version=version)
    decoder = getattr(messages, f"{message.side.upper()}_DECODERS")[api_key][version]
    assert decode_body(decoder, "kafka-python bytes", data) == obj


def test_the_cross_check_covers_the_core_apis() -> None:
    covered = {(c.values[0], c.values[1].side) for c in CASES}
    for key in (0, 1, 2, 3, 18, 22, 23):
        assert (key, "Request") in covered and (key, "Response") in covered, key
    assert uuid.UUID(int=0) == messages.ZERO_UUID
