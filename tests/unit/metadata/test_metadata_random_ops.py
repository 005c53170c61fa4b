"""Seeded random histories of controller decisions: invariants after every commit, and the log replays.

Each seed drives a random mix of registrations, heartbeats (catch-up, fence, controlled shutdown),
session expiries, topic creation/deletion, partition growth, ISR changes from leaders, elections and
config changes. After every committed decision the controller's invariants hold (only unfenced
brokers lead, leaders are in the ISR, ISR within replicas, the broker index agrees); at the end a
replay of the whole log — and snapshot + the rest, at a random cut — equals the live image. A failing
seed is printed in the assertion and replays exactly.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from metadata.api import (
    AlterableConfig,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerState,
    ElectLeadersRequest,
    NewPartitions,
    NewTopic,
)
from metadata.configs import AlterConfigOp
from metadata.image import MetadataImage
from metadata.partition_change import Election
from metadata.records import ConfigResourceType, decode_batch, encode_batch
from proto.kafka_types import NO_BROKER_EPOCH, NO_LEADER

STEPS = 250


def _random_alter_partition(h, rng: random.Random):
    topics = list(h.image.topics.values())
    if not topics:
        return None
    topic = rng.choice(topics)
    index, p = rng.choice(sorted(topic.partitions.items()))
    if p.leader == NO_LEADER:
        return None
    others = [r for r in p.replicas if r != p.leader]
    new_isr = (p.leader, *rng.sample(others, rng.randint(0, len(others))))

    # KIP-903: the broker epochs a leader saw; sometimes unknown, sometimes an older incarnation's.
    def state(b: int) -> BrokerState:
        registered = h.image.brokers.get(b)
        epoch = registered.broker_epoch if registered is not None else NO_BROKER_EPOCH
        return BrokerState(b, rng.choice([epoch, epoch, NO_BROKER_EPOCH, epoch - 1]))

    new_isr_with_epochs = tuple(state(b) for b in new_isr)
    item = AlterPartitionItem(topic.topic_id, index, p.leader_epoch, p.partition_epoch, new_isr_with_epochs)
    epoch = h.image.brokers[p.leader].broker_epoch
    return h.controller.handle_alter_partition(AlterPartitionRequest(p.leader, epoch, (item,)))


def _step(h, rng: random.Random) -> None:
    c = h.controller
    brokers = sorted(h.image.brokers)
    names = sorted(h.image.topic_ids)
    kinds = ["register", "heartbeat", "fence", "shutdown", "expire", "grow", "isr", "isr", "elect", "config"]
    kind = rng.choice([*kinds, "create", "create", "create", "delete"])
    result = None
    if kind == "register" or not brokers:
        h.register(rng.randint(1, 5), rack=rng.choice(["", "a", "b"]), unfence=rng.random() < 0.7)
        return
    b = rng.choice(brokers)
    epoch = h.image.brokers[b].broker_epoch
    if kind == "heartbeat":
        h.heartbeat(b, epoch)
    elif kind == "fence":
        h.heartbeat(b, epoch, want_fence=True)
    elif kind == "shutdown":
        h.heartbeat(b, epoch, want_shut_down=True)
    elif kind == "expire":
        h.now_ms += c.config.broker_session_timeout_ms + 1
        for other in brokers:
            if rng.random() < 0.6:
                c.heartbeats.touch(other, h.now_ms)
        result = c.maybe_fence_stale_brokers(h.now_ms)
    elif kind == "create":
        configs = {"unclean.leader.election.enable": "true"} if rng.random() < 0.3 else {}
        topic = NewTopic(f"t{rng.randint(0, 12)}", rng.randint(1, 6), rng.randint(1, 3), configs=configs)
        result = c.handle_create_topics([topic])
    elif kind == "delete" and names:
        result = c.handle_delete_topics([rng.choice(names)])
    elif kind == "grow" and names:
        name = rng.choice(names)
        result = c.handle_create_partitions(
            [NewPartitions(name, len(h.image.topic_by_name(name).partitions) + 2)]
        )
    elif kind == "isr":
        result = _random_alter_partition(h, rng)
    elif kind == "elect":
        result = c.handle_elect_leaders(
            ElectLeadersRequest(rng.choice([Election.PREFERRED, Election.UNCLEAN]))
        )
    elif kind == "config" and names:
        change = AlterableConfig("retention.ms", AlterConfigOp.SET, str(rng.randint(1, 10**6)))
        result = c.handle_incremental_alter_configs(
            [AlterConfigsResource(ConfigResourceType.TOPIC, rng.choice(names), (change,))]
        )
    if result is not None:
        h.commit(result)


@pytest.mark.parametrize("seed", range(12))
def test_random_histories_keep_invariants_and_replay(make_harness, seed: int) -> None:
    """Invariants hold after every decision; replaying the log (whole, or snapshot + rest) gives the
    live image (KRaft: the image is a pure function of the log)."""
    h = make_harness(seed=seed)
    rng = random.Random(seed)
    for step in range(STEPS):
        try:
            _step(h, rng)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, step {step}: {exc}") from exc
    log = [(decode_batch(encode_batch(records)), offset) for records, offset in h.log]
    replayed = MetadataImage()
    cut = rng.randrange(len(log) + 1)
    for records, offset in log[:cut]:
        replayed.apply_batch(records, offset)
    replayed = MetadataImage.from_snapshot(replayed.snapshot())
    for records, offset in log[cut:]:
        replayed.apply_batch(records, offset)
    assert replayed.state() == h.image.state(), f"seed {seed}: snapshot at {cut} + rest != live image"
    kinds = Counter(type(r).__name__ for records, _ in log for r in records)
    for kind in (
        "TopicRecord",
        "PartitionChangeRecord",
        "BrokerRegistrationChangeRecord",
        "RemoveTopicRecord",
    ):
        assert kinds[kind] > 0, (
            f"seed {seed}: no {kind} in the history {dict(kinds)}; it exercised too little"
        )
