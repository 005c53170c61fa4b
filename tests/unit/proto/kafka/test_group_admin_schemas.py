"""The group, admin and tool APIs' schemas against kafka-python 3.0.12, which encodes the same messages.

Round trips, truncations and unknown tags of every API are in test_kafka_roundtrip.py; here every
version of these APIs is encoded by our codec (from the samples of ``samples.py``: a non-default
value in every field, or null in every nullable one) and read by kafka-python's protocol classes:
the JSON-driven ones (``kafka.protocol.consumer``, ``.admin``, ``.metadata``) must decode the same
values and re-encode the same bytes, and the older hand-written ones (``kafka.protocol.old``, an
independent transcription of the protocol guide) must consume exactly our bytes and re-encode them.
A field we lack, misplace, mistype or mark nullable in the wrong versions shows as a difference.
"""

from __future__ import annotations

import importlib
import io
import random
import re
import uuid
from typing import Any

import pytest

from proto.kafka import api, generate, messages
from proto.kafka.generate import Message, Struct
from tests.unit.proto.kafka.samples import MODES, build, to_plain

# API name -> (api key, versions served, first flexible version, kafka-python module of its classes)
SERVED = {
    "FindCoordinator": (10, (0, 4), 3, "kafka.protocol.metadata.find_coordinator"),
    "JoinGroup": (11, (0, 7), 6, "kafka.protocol.consumer.group"),
    "SyncGroup": (14, (0, 5), 4, "kafka.protocol.consumer.group"),
    "Heartbeat": (12, (0, 4), 4, "kafka.protocol.consumer.group"),
    "LeaveGroup": (13, (0, 5), 4, "kafka.protocol.consumer.group"),
    "OffsetCommit": (8, (0, 8), 8, "kafka.protocol.consumer.group"),
    "OffsetFetch": (9, (0, 8), 6, "kafka.protocol.consumer.group"),
    "ListGroups": (16, (0, 4), 3, "kafka.protocol.admin.groups"),
    "DescribeGroups": (15, (0, 5), 5, "kafka.protocol.admin.groups"),
    "DeleteGroups": (42, (0, 2), 2, "kafka.protocol.admin.groups"),
    "OffsetDelete": (47, (0, 0), None, "kafka.protocol.consumer.group"),
    "CreateTopics": (19, (0, 7), 5, "kafka.protocol.admin.topics"),
    "DeleteTopics": (20, (0, 6), 4, "kafka.protocol.admin.topics"),
    "CreatePartitions": (37, (0, 3), 2, "kafka.protocol.admin.topics"),
    "DescribeConfigs": (32, (0, 4), 4, "kafka.protocol.admin.configs"),
    "AlterConfigs": (33, (0, 2), 2, "kafka.protocol.admin.configs"),
    "IncrementalAlterConfigs": (44, (0, 1), 1, "kafka.protocol.admin.configs"),
    "DescribeCluster": (60, (0, 1), 0, "kafka.protocol.admin.cluster"),
    "ElectLeaders": (43, (0, 2), 2, "kafka.protocol.admin.topics"),
    "DeleteRecords": (21, (0, 2), 2, "kafka.protocol.admin.topics"),
    "DescribeProducers": (61, (0, 0), 0, "kafka.protocol.admin.transactions"),
}

# Where kafka-python names a field otherwise: OffsetCommit's after KIP-848 (v9+, which we do not
# serve), DescribeCluster's by its own patch.
KAFKA_PYTHON_NAMES = {
    ("OffsetCommit", "generation_id"): "generation_id_or_member_epoch",
    ("DescribeCluster", "cluster_authorized_operations"): "authorized_operations",
}
# kafka-python reads these int32 fields as the set of bit numbers set ({31}, i.e. INT32_MIN, as None).
KAFKA_PYTHON_BIT_SETS = {
    ("DescribeGroups", "authorized_operations"),
    ("DescribeCluster", "cluster_authorized_operations"),
}

# kafka-python's hand-written classes (one per version): module under kafka.protocol.old, versions.
OLD_CLASSES = {
    "FindCoordinator": ("find_coordinator", range(3)),
    "JoinGroup": ("group", range(6)),
    "SyncGroup": ("group", range(4)),
    "Heartbeat": ("group", range(4)),
    "LeaveGroup": ("group", range(4)),
    "OffsetCommit": ("commit", range(8)),
    "OffsetFetch": ("commit", range(6)),
    "ListGroups": ("admin", range(3)),
    "DescribeGroups": ("admin", range(4)),
    "DeleteGroups": ("admin", range(2)),
    "CreateTopics": ("admin", range(4)),
    "DeleteTopics": ("admin", range(4)),
    "CreatePartitions": ("admin", range(2)),
    "DescribeConfigs": ("admin", range(3)),
    "AlterConfigs": ("admin", range(2)),
    "ElectLeaders": ("admin", range(2)),
    "DeleteRecords": ("admin", range(1)),
}

APIS = {a.name: a for a in generate.load_apis() if a.name in SERVED}
CLASSES = {name: obj for name, obj in vars(messages).items() if isinstance(obj, type)}
CASES = [
    pytest.param(message, v, id=f"{message.api_name}{message.side}-v{v}")
    for a in APIS.values()
    for message in (a.request, a.response)
    for v in message.versions
]


def sample(message: Message, version: int, mode: str) -> Any:
    rng = random.Random(f"{message.root.class_name}/{version}/{mode}/kafka-python")
    return build(message.root, version, mode, rng, CLASSES)


def encode_body(message: Message, version: int, obj: Any) -> bytes:
    out = bytearray()
    getattr(messages, f"{message.side.upper()}_ENCODERS")[message.api_key][version](out, obj)
    return bytes(out)


def as_kafka_python(s: Struct, plain: dict, version: int, api_name: str) -> dict:
    """Our message (as ``to_plain`` gives it) restricted to the fields present in ``version``,
    under kafka-python's names and in its shapes."""
    out = {}
    for f in s.fields:
        if not f.present(version):
            continue
        v = plain[f.name]
        if f.struct is not None and v is not None:
            v = (
                [as_kafka_python(f.struct, x, version, api_name) for x in v]
                if f.is_array
                else (as_kafka_python(f.struct, v, version, api_name))
            )
        if (api_name, f.name) in KAFKA_PYTHON_BIT_SETS:
            v = {bit for bit in range(32) if v >> bit & 1}
            v = None if v == {31} else v
        if isinstance(v, uuid.UUID) and v.int == 0:
            v = None  # kafka-python reads the all-zero uuid as None
        out[KAFKA_PYTHON_NAMES.get((api_name, f.name), f.name)] = v
    return out


def kafka_python_plain(value: Any) -> Any:
    """A kafka-python message as dicts and lists (its own to_dict() turns bytes into str)."""
    if hasattr(value, "to_dict"):
        skip = ("tags", "unknown_tags", "version")
        return {k: kafka_python_plain(getattr(value, k)) for k in value.to_dict() if k not in skip}
    if isinstance(value, list):
        return [kafka_python_plain(v) for v in value]
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def kafka_versions(text: str | None, version: int) -> bool:
    """Whether ``version`` is in a Kafka message spec's version range ("3+", "0-7", "1", "none")."""
    if text is None or text == "none":
        return False
    if text.endswith("+"):
        return version >= int(text[:-1])
    low, _, high = text.partition("-")
    return int(low) <= version <= int(high or low)


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def compare_fields(s: Struct, spec_fields: list[dict], version: int, api_name: str, at: str) -> list[str]:
    """What differs in ``version`` between our struct and Kafka's spec of it (as kafka-python ships it):
    which fields are on the wire, in what order, their types, nullability and tags."""
    ours = [f for f in s.fields if f.present(version)]
    theirs = [f for f in spec_fields if kafka_versions(f["versions"], version)]
    names = [KAFKA_PYTHON_NAMES.get((api_name, f.name), f.name) for f in ours]
    their_names = [snake(f["name"]) for f in theirs]
    if names != their_names:
        return [f"{at} v{version}: fields {names} != Kafka's {their_names}"]
    problems = []
    for f, g in zip(ours, theirs, strict=True):
        where = f"{at}.{f.name} v{version}"
        their_type = g["type"].replace("bitfield", "int32")
        element, their_element = f.type.removeprefix("[]"), their_type.removeprefix("[]")
        if f.is_array != their_type.startswith("[]") or (f.struct is None and element != their_element):
            problems.append(f"{where}: type {f.type} != Kafka's {g['type']}")
        if f.is_nullable(version) != kafka_versions(g.get("nullableVersions"), version):
            problems.append(f"{where}: nullable {f.is_nullable(version)} differs from Kafka's")
        their_tag = g.get("tag") if kafka_versions(g.get("taggedVersions"), version) else None
        if (f.tag if f.is_tagged(version) else None) != their_tag:
            problems.append(f"{where}: tag differs from Kafka's ({their_tag})")
        if f.struct is not None:
            problems += compare_fields(f.struct, g["fields"], version, api_name, where)
    return problems


@pytest.mark.parametrize(("message", "version"), CASES)
def test_fields_nullability_and_tags_match_kafkas_spec(message: Message, version: int) -> None:
    module = importlib.import_module(SERVED[message.api_name][3])
    spec = getattr(module, message.root.class_name).json
    assert (
        compare_fields(message.root, spec["fields"], version, message.api_name, message.root.class_name) == []
    )


def kafka_default(text: str, type_name: str) -> Any:
    if text == "null":
        return None
    if type_name == "bool":
        return text == "true"
    if type_name in ("int8", "int16", "int32", "int64", "uint16", "bitfield"):
        return int(text, 0)
    return text


def compare_defaults(s: Struct, spec_fields: list[dict], api_name: str, at: str) -> list[str]:
    """Our generated defaults against every explicit default of Kafka's spec (what a field is when
    absent from a version, and what a tagged field is not written for)."""
    by_name = {snake(g["name"]): g for g in spec_fields}
    instance = CLASSES[s.class_name]()
    problems = []
    for f in s.fields:
        g = by_name[KAFKA_PYTHON_NAMES.get((api_name, f.name), f.name)]
        ours = getattr(instance, f.name)
        if "default" in g and not f.is_array and kafka_default(g["default"], g["type"]) != ours:
            problems.append(f"{at}.{f.name}: default {ours!r} != Kafka's {g['default']!r}")
        if f.struct is not None:
            problems += compare_defaults(f.struct, g["fields"], api_name, f"{at}.{f.name}")
    return problems


MESSAGES = [
    pytest.param(message, id=f"{message.api_name}{message.side}")
    for a in APIS.values()
    for message in (a.request, a.response)
]


@pytest.mark.parametrize("message", MESSAGES)
def test_defaults_match_kafkas_spec(message: Message) -> None:
    module = importlib.import_module(SERVED[message.api_name][3])
    spec = getattr(module, message.root.class_name).json
    assert compare_defaults(message.root, spec["fields"], message.api_name, message.root.class_name) == []


def test_every_api_of_this_file_has_a_schema() -> None:
    assert set(APIS) == set(SERVED)


@pytest.mark.parametrize("name", sorted(SERVED))
def test_served_and_flexible_versions(name: str) -> None:
    api_key, versions, first_flexible, _ = SERVED[name]
    assert APIS[name].api_key == api_key
    assert api.SUPPORTED_VERSIONS[api_key] == versions
    assert messages.FLEXIBLE_MIN_VERSION[api_key] == first_flexible


@pytest.mark.parametrize(("message", "version"), CASES)
@pytest.mark.parametrize("mode", MODES)
def test_kafka_python_reads_our_values_and_writes_our_bytes(
    message: Message, version: int, mode: str
) -> None:
    obj = sample(message, version, mode)
    body = encode_body(message, version, obj)
    module = importlib.import_module(SERVED[message.api_name][3])
    theirs_class = getattr(module, message.root.class_name)
    theirs = theirs_class.decode(body, version=version)
    theirs._header = None  # decode() leaves it unset and encode() reads it
    assert bytes(theirs.encode()) == body
    expected = as_kafka_python(message.root, to_plain(obj), version, message.api_name)
    decoded = kafka_python_plain(theirs)
    assert {k: decoded[k] for k in expected} == expected


OLD_CASES = [
    case
    for case in CASES
    if case.values[0].api_name in OLD_CLASSES and case.values[1] in OLD_CLASSES[case.values[0].api_name][1]
]


@pytest.mark.parametrize(("message", "version"), OLD_CASES)
def test_kafka_python_hand_written_classes_read_our_bytes_exactly(message: Message, version: int) -> None:
    obj = sample(message, version, "full")
    body = encode_body(message, version, obj)
    module = importlib.import_module(f"kafka.protocol.old.{OLD_CLASSES[message.api_name][0]}")
    old = getattr(module, f"{message.root.class_name}_v{version}")
    stream = io.BytesIO(body)
    values = old.SCHEMA.decode(stream)
    assert stream.tell() == len(body), "kafka-python's layout ends before ours"
    assert bytes(old.SCHEMA.encode(values)) == body
