"""Topics, partitions and leadership: record generation over a read-only image.

Kafka's ``ReplicationControlManager``, as pure functions of ``(image, request, rng)`` that return
records and per-item results. Nothing here changes the image; the controller replays the records
once they commit. Generation walks a *pending* view when one decision touches a partition twice
(fencing several brokers at once), and emits one ``PartitionChangeRecord`` per partition.

Cost: moving leadership off a broker visits only the partitions it hosts (the image's
``replicas_by_broker`` index), so fencing a broker that leads 10,000 partitions is O(10,000).
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable, Iterable

from metadata import configs as cfg
from metadata.api import (
    AlterPartitionItem,
    AlterPartitionItemResult,
    BrokerState,
    ElectLeadersRequest,
    ElectLeadersResult,
)
from metadata.image import (
    MetadataImage,
    PartitionRegistration,
    TopicIdAndIndex,
    changed_partition,
    isr_ineligibility,
)
from metadata.partition_change import Election, isr_without, partition_change_builder
from metadata.placement import PlacementBroker, place_partitions
from metadata.records import ZERO_UUID, PartitionChangeRecord, PartitionRecord
from proto.errors import OK, ApiError
from proto.errors import ErrorCode as Code
from proto.kafka_types import NO_BROKER_EPOCH, NO_LEADER
from proto.topic_configs import UNCLEAN_LEADER_ELECTION


def new_topic_id(rng: random.Random, taken: Iterable[str]) -> str:
    """A Kafka-style Uuid (16 random bytes, url-safe base64 without padding), unused so far."""
    taken = set(taken)
    while True:
        topic_id = base64.urlsafe_b64encode(rng.getrandbits(128).to_bytes(16, "big")).decode().rstrip("=")
        if topic_id not in taken and topic_id != ZERO_UUID:
            return topic_id


def unclean_allowed(image: MetadataImage, topic_id: str) -> bool:
    topic = image.topics[topic_id]
    value = cfg.effective_config(image.topic_overrides(topic.name), image.cluster_defaults())[
        UNCLEAN_LEADER_ELECTION
    ]
    return value == "true"


def usable_fn(
    image: MetadataImage, unusable: frozenset[int] = frozenset(), usable: frozenset[int] = frozenset()
) -> Callable[[int], bool]:
    """A predicate: may this broker lead / be in an ISR, given brokers being fenced or unfenced now.
    A set lookup (brokers are few, partitions many: this runs once per replica per decision)."""
    base = {b for b, reg in image.brokers.items() if reg.is_usable}
    return frozenset((base - unusable) | usable).__contains__


def new_partition_records(
    image: MetadataImage, topic_id: str, first: int, assignment: list[tuple[int, ...]]
) -> tuple[list[PartitionRecord], ApiError]:
    """PartitionRecords for new partitions: ISR = the usable replicas, leader = the first of them."""
    is_usable = usable_fn(image)
    out = []
    for partition, replicas in enumerate(assignment, start=first):
        isr = tuple(r for r in replicas if is_usable(r))
        if not isr:
            return [], ApiError(
                Code.INVALID_REPLICA_ASSIGNMENT,
                f"all replicas {list(replicas)} of partition {partition} are fenced or shutting down",
            )
        out.append(PartitionRecord(topic_id, partition, replicas, isr, isr[0]))
    return out, OK


def placement(
    image: MetadataImage, count: int, rf: int, rng: random.Random, first: int = 0
) -> list[tuple[int, ...]]:
    brokers = [PlacementBroker(b.broker_id, b.rack) for b in image.usable_brokers()]
    return place_partitions(brokers, count, rf, rng, first_partition=first)


# ---- leadership moves ----------------------------------------------------------------------------


def _merged_records(
    image: MetadataImage, changed: dict[TopicIdAndIndex, PartitionRegistration]
) -> list[PartitionChangeRecord]:
    """One record per changed partition: from its state in the image to its final state."""
    out = []
    for (topic_id, partition), new in changed.items():
        old = image.topics[topic_id].partitions[partition]
        if new.leader != old.leader or new.isr != old.isr:
            leader = None if new.leader == old.leader else new.leader
            out.append(
                PartitionChangeRecord(topic_id, partition, leader, None if new.isr == old.isr else new.isr)
            )
    return out


def move_leadership_off(image: MetadataImage, broker_ids: Iterable[int]) -> list[PartitionChangeRecord]:
    """Remove brokers being fenced or shut down from every ISR; re-elect where one of them led.

    ``changed`` is the pending view: when several brokers leave at once, a partition's second change
    starts from its first, and one merged record per partition comes out."""
    leaving = frozenset(broker_ids)
    is_usable = usable_fn(image, unusable=leaving)
    topics = image.topics
    changed: dict[TopicIdAndIndex, PartitionRegistration] = {}
    unclean_cache: dict[str, bool] = {}
    for broker_id in sorted(leaving):
        for tp in image.partitions_hosted_by(broker_id):
            topic_id, partition = tp
            p = changed.get(tp) or topics[topic_id].partitions[partition]
            if broker_id not in p.isr and p.leader != broker_id:
                continue
            unclean = unclean_cache.get(topic_id)
            if unclean is None:
                unclean = unclean_cache[topic_id] = unclean_allowed(image, topic_id)
            record = partition_change_builder(
                topic_id,
                partition,
                p,
                is_usable,
                target_isr=isr_without(p.isr, broker_id),
                unclean_allowed=unclean,
            )
            if record is not None:
                changed[tp] = changed_partition(p, record)
    return _merged_records(image, changed)


def elect_offline_partitions(image: MetadataImage, broker_id: int) -> list[PartitionChangeRecord]:
    """Leaders for the leaderless partitions a broker hosts, now that it becomes usable."""
    is_usable = usable_fn(image, usable=frozenset({broker_id}))
    out = []
    for topic_id, partition in image.partitions_hosted_by(broker_id):
        p = image.partition(topic_id, partition)
        assert p is not None
        if p.leader != NO_LEADER:
            continue
        record = partition_change_builder(
            topic_id, partition, p, is_usable, unclean_allowed=unclean_allowed(image, topic_id)
        )
        if record is not None:
            out.append(record)
    return out


# ---- ElectLeaders --------------------------------------------------------------------------------


def _elect_one(
    image: MetadataImage, topic_id: str, partition: int, election: Election, is_usable: Callable[[int], bool]
) -> tuple[PartitionChangeRecord | None, ApiError, int]:
    p = image.partition(topic_id, partition)
    assert p is not None
    if election == Election.PREFERRED:
        if p.leader == p.preferred_leader:
            return None, ApiError(Code.ELECTION_NOT_NEEDED, f"broker {p.leader} already leads"), p.leader
        if p.preferred_leader not in p.isr or not is_usable(p.preferred_leader):
            msg = f"preferred leader {p.preferred_leader} is not in the ISR {list(p.isr)} or not usable"
            return None, ApiError(Code.PREFERRED_LEADER_NOT_AVAILABLE, msg), p.leader
    elif p.leader != NO_LEADER:
        return None, ApiError(Code.ELECTION_NOT_NEEDED, f"broker {p.leader} leads already"), p.leader
    record = partition_change_builder(topic_id, partition, p, is_usable, election=election)
    new = p if record is None else changed_partition(p, record)
    if new.leader == NO_LEADER:
        msg = f"no usable replica among {list(p.replicas)}"
        return None, ApiError(Code.ELIGIBLE_LEADERS_NOT_AVAILABLE, msg), NO_LEADER
    return record, OK, new.leader


def elect_leaders(
    image: MetadataImage, request: ElectLeadersRequest
) -> tuple[list[PartitionChangeRecord], list[ElectLeadersResult]]:
    is_usable = usable_fn(image)
    explicit = request.partitions is not None
    wanted = request.partitions if request.partitions is not None else _all_partitions(image)
    records: list[PartitionChangeRecord] = []
    results = []
    for name, partition in wanted:
        topic = image.topic_by_name(name)
        if topic is None or partition not in topic.partitions:
            error = ApiError(Code.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {name}-{partition}")
            results.append(ElectLeadersResult(name, partition, error))
            continue
        record, error, leader = _elect_one(image, topic.topic_id, partition, request.election, is_usable)
        if record is not None:
            records.append(record)
        if explicit or error.code != Code.ELECTION_NOT_NEEDED:
            results.append(ElectLeadersResult(name, partition, error, leader))
    return records, results


def _all_partitions(image: MetadataImage) -> list[tuple[str, int]]:
    return [
        (t.name, p) for t in sorted(image.topics.values(), key=lambda t: t.name) for p in sorted(t.partitions)
    ]


# ---- AlterPartition ------------------------------------------------------------------------------


def alter_partition_item(
    image: MetadataImage, broker_id: int, item: AlterPartitionItem
) -> tuple[PartitionChangeRecord | None, AlterPartitionItemResult]:
    """Kafka's rules: only the current leader, with the current leader and partition epochs, may
    change the ISR; the leader stays in it; every member must be an eligible replica (KIP-903:
    registered, unfenced, not shutting down, and with the broker epoch the leader saw in its fetches
    equal to the current registration's — so a fetch from an older incarnation, which may have lost
    data, never admits a broker to the ISR). A member being added must carry its epoch; -1 (unknown)
    is accepted only for members already in the ISR (a new leader may not have heard from them yet)."""

    def fail(code: Code, message: str) -> tuple[None, AlterPartitionItemResult]:
        return None, AlterPartitionItemResult(item.topic_id, item.partition, ApiError(code, message))

    where = f"partition {item.partition} of topic id {item.topic_id}"
    p = image.partition(item.topic_id, item.partition)
    if p is None:
        return fail(Code.UNKNOWN_TOPIC_OR_PARTITION, f"no {where}")
    if p.leader != broker_id:
        return fail(
            Code.NOT_LEADER_OR_FOLLOWER, f"broker {broker_id} does not lead {where} (leader {p.leader})"
        )
    if item.leader_epoch < p.leader_epoch:
        return fail(Code.FENCED_LEADER_EPOCH, f"leader epoch {item.leader_epoch} < current {p.leader_epoch}")
    if item.leader_epoch > p.leader_epoch:
        return fail(Code.UNKNOWN_LEADER_EPOCH, f"leader epoch {item.leader_epoch} > current {p.leader_epoch}")
    if item.partition_epoch != p.partition_epoch:
        msg = f"partition epoch {item.partition_epoch} != current {p.partition_epoch}; refresh metadata"
        return fail(Code.INVALID_UPDATE_VERSION, msg)
    new_isr = tuple(item.new_isr)
    if broker_id not in new_isr or len(set(new_isr)) != len(new_isr):
        return fail(Code.INVALID_REQUEST, f"ISR {list(new_isr)} must hold the leader {broker_id} once each")
    outsiders = [r for r in new_isr if r not in p.replicas]
    if outsiders:
        return fail(Code.INVALID_REQUEST, f"ISR members {outsiders} are not replicas {list(p.replicas)}")
    ineligible = [
        reason
        for member in item.new_isr_with_epochs
        if (reason := _ineligible_reason(image, member, member.broker_id in p.isr)) is not None
    ]
    if ineligible:
        return fail(Code.INELIGIBLE_REPLICA, f"ISR {list(new_isr)} refused: {'; '.join(ineligible)}")
    record = None if new_isr == p.isr else PartitionChangeRecord(item.topic_id, item.partition, isr=new_isr)
    new = p if record is None else changed_partition(p, record)
    return record, AlterPartitionItemResult(
        item.topic_id, item.partition, OK, new.leader, new.isr, new.leader_epoch, new.partition_epoch
    )


def _ineligible_reason(image: MetadataImage, member: BrokerState, in_isr: bool) -> str | None:
    """Why ``member`` may not be in the ISR, or None; an unknown epoch passes only for a member that is
    already in it (a leader may not have heard from it in its epoch yet)."""
    unchecked = in_isr and member.broker_epoch == NO_BROKER_EPOCH
    epoch = None if unchecked else member.broker_epoch
    return isr_ineligibility(member.broker_id, image.brokers.get(member.broker_id), epoch)
