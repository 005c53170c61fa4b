"""Every API, side and version of the generated codec: encode -> decode gives the message back.

Samples put a non-default value in every field present in the version (mode ``full``: tagged
fields set, nullable fields non-null) or null in every field nullable in that version with tagged
fields absent (mode ``nulls``). A second generated codec, built from the same schemas plus an
extra tagged field in every flexible struct, checks that unknown tags are skipped at every depth.
"""

from __future__ import annotations

import copy
import random
import sys
import types
from typing import Any

import pytest

from proto.kafka import generate, messages
from proto.kafka.codec import KafkaDecodeError, decode_body
from proto.kafka.schema import Field, Message, Versions, all_structs
from tests.unit.proto.kafka.samples import MODES, build, to_plain

APIS = generate.load_apis()
CLASSES = {name: obj for name, obj in vars(messages).items() if isinstance(obj, type)}
CASES = [
    pytest.param(api.api_key, message, v, mode, id=f"{api.name}{message.side}-v{v}-{mode}")
    for api in APIS
    for message in (api.request, api.response)
    for v in message.versions
    for mode in MODES
]


def tables(message: Message, module: Any = messages) -> tuple[dict, dict]:
    side = message.side.upper()
    return getattr(module, f"{side}_ENCODERS"), getattr(module, f"{side}_DECODERS")


def sample(message: Message, v: int, mode: str, classes: dict[str, type] = CLASSES) -> Any:
    return build(message.root, v, mode, random.Random(f"{message.root.class_name}/{v}/{mode}"), classes)


@pytest.mark.parametrize(("api_key", "message", "version", "mode"), CASES)
def test_round_trip(api_key: int, message: Message, version: int, mode: str) -> None:
    encoders, decoders = tables(message)
    obj = sample(message, version, mode)
    out = bytearray()
    encoders[api_key][version](out, obj)
    back = decode_body(decoders[api_key][version], "test", bytes(out))
    assert back == obj
    again = bytearray()
    encoders[api_key][version](again, back)
    assert again == out, "re-encoding the decoded message changed its bytes"


@pytest.mark.parametrize(("api_key", "message", "version", "mode"), CASES)
def test_every_truncation_fails_cleanly(api_key: int, message: Message, version: int, mode: str) -> None:
    """Every proper prefix of a valid body is refused with KafkaDecodeError, nothing else."""
    encoders, decoders = tables(message)
    out = bytearray()
    encoders[api_key][version](out, sample(message, version, mode))
    data = bytes(out)
    for cut in range(len(data)):
        with pytest.raises(KafkaDecodeError):
            decode_body(decoders[api_key][version], "test", data[:cut])


UNKNOWN_TAG = 77


def augmented_module() -> types.ModuleType:
    """The codec generated with an extra tagged string field (tag 77) in every flexible struct."""
    apis = copy.deepcopy(APIS)
    for api in apis:
        for message in (api.request, api.response):
            if message.flexible is None:
                continue
            flex = Versions(max(message.flexible.low, message.valid.low), message.valid.high)
            for struct_ in all_structs(message.root):
                if any(f.name == "zz_unknown" for f in struct_.fields):
                    continue  # a common struct shared by request and response
                struct_.fields.append(
                    Field("zz_unknown", "string", flex, None, flex, UNKNOWN_TAG, "", True, "test")
                )
    module = types.ModuleType("augmented_messages")
    sys.modules[module.__name__] = module  # dataclasses look their module up while building classes
    exec(compile(generate.render(apis), "augmented_messages.py", "exec"), module.__dict__)
    return module


AUGMENTED = augmented_module()
AUGMENTED_CLASSES = {name: obj for name, obj in vars(AUGMENTED).items() if isinstance(obj, type)}
FLEXIBLE_CASES = [
    pytest.param(api.api_key, message, v, id=f"{api.name}{message.side}-v{v}")
    for api in APIS
    for message in (api.request, api.response)
    for v in message.versions
    if message.is_flexible(v)
]


def set_unknown(obj: Any) -> None:
    if hasattr(obj, "__dataclass_fields__"):
        if "zz_unknown" in obj.__dataclass_fields__:
            obj.zz_unknown = "a value this codec does not know"
        for name in obj.__dataclass_fields__:
            set_unknown(getattr(obj, name))
    elif isinstance(obj, list):
        for item in obj:
            set_unknown(item)


def drop_unknown(plain: Any) -> Any:
    if isinstance(plain, dict):
        return {k: drop_unknown(v) for k, v in plain.items() if k != "zz_unknown"}
    if isinstance(plain, list):
        return [drop_unknown(x) for x in plain]
    return plain


@pytest.mark.parametrize(("api_key", "message", "version"), FLEXIBLE_CASES)
def test_unknown_tags_are_skipped_at_every_depth(api_key: int, message: Message, version: int) -> None:
    aug_message = next(
        m
        for a in copy.deepcopy(APIS)
        for m in (a.request, a.response)
        if m.root.class_name == message.root.class_name
    )
    obj = sample(aug_message, version, "full", AUGMENTED_CLASSES)
    set_unknown(obj)
    encoders, _ = tables(message, AUGMENTED)
    _, decoders = tables(message)
    out = bytearray()
    encoders[api_key][version](out, obj)
    assert b"a value this codec does not know" in out
    back = decode_body(decoders[api_key][version], "test", bytes(out))
    assert to_plain(back) == drop_unknown(to_plain(obj))


def test_lying_array_count_fails_before_allocating() -> None:
    """A count of 2^31 - 1 with ten bytes left is refused at once (no list of 2^31 elements)."""
    body = (
        bytes.fromhex("ffff")
        + (1).to_bytes(2, "big")
        + (1000).to_bytes(4, "big")
        + b"\x7f\xff\xff\xff"
        + b"\0" * 10
    )
    with pytest.raises(KafkaDecodeError, match="array count 2147483647"):
        decode_body(messages.REQUEST_DECODERS[0][3], "ProduceRequest v3", body)
