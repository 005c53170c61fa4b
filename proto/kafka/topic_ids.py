"""Topic ids between the wire and the broker: Kafka's Uuid on the wire, our topic id (Kafka's Uuid
string: url-safe base64 of 16 bytes, no padding) everywhere else. A module of its own so that both
``broker.kafka.handlers.context`` and ``broker.kafka.handlers.refusals`` (which ``context`` imports) use
it."""

from __future__ import annotations

import base64
import binascii
import functools
import uuid

ZERO_UUID = uuid.UUID(int=0)


# Both conversions run for every replica fetch round (on the follower and on the leader) and for every
# Fetch/Metadata answer, over a handful of topic ids: cached (bounded, since a client's ids are arbitrary).
ID_CACHE_SIZE = 4096


@functools.lru_cache(maxsize=ID_CACHE_SIZE)
def uuid_of(topic_id: str) -> uuid.UUID:
    """Our topic id (Kafka's Uuid string: url-safe base64 of 16 bytes, no padding) -> the wire's uuid;
    "" -> the zero uuid (Kafka's "no id")."""
    if not topic_id:
        return ZERO_UUID
    return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=="))


@functools.lru_cache(maxsize=ID_CACHE_SIZE)
def topic_id_of(value: uuid.UUID) -> str:
    """The wire's uuid -> our topic id string; the zero uuid -> ""."""
    if value == ZERO_UUID:
        return ""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def valid_topic_id(text: str) -> bool:
    try:
        return len(base64.urlsafe_b64decode(text + "==")) == 16
    except (binascii.Error, ValueError):
        return False
