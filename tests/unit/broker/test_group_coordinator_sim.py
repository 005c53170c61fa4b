"""Seeded random schedules against the group coordinator core: members join, sync, heartbeat, commit,
leave, stall and restart (static and dynamic) while appends succeed, fail or lag and time jumps.

Checked after every step: the core's invariants (run inside each call) and that no request is
answered twice. Checked per generation: every SyncGroup answered OK carries exactly what that
generation's leader assigned to the member (the coordinator never mixes generations), and at most
one leader assigns per generation. At the end everyone leaves or goes silent and time passes every
timeout: every request ever sent has been answered, and the group is Empty.

Replay one schedule: ``pytest tests/unit/broker/test_group_coordinator_sim.py -k 'seed-17'``.
"""

from __future__ import annotations

import random

import pytest
from group_harness import GROUP, REBALANCE_MS, SESSION_MS, Harness

from broker.group.metadata import GroupState
from broker.group.requests import JoinGroupResponse, SyncGroupResponse
from proto.errors import ErrorCode as E

SEEDS = range(100)
STEPS = 250
MEMBERS = 4


class SimMember:
    def __init__(self, index: int, static: bool) -> None:
        self.instance_id = f"i-{index}" if static else None
        self.member_id = ""
        self.generation = -1
        self.join_rid: int | None = None
        self.sync_rid: int | None = None


def step(
    h: Harness, rng: random.Random, m: SimMember, sent: list[int], plans: dict[int, dict[str, bytes]]
) -> None:
    """One action of member ``m``: follow up its answered requests, or act on its own."""
    if m.join_rid is not None:
        answer = h.answers.get(m.join_rid)
        if answer is None:
            return
        m.join_rid = None
        assert isinstance(answer, JoinGroupResponse)
        if answer.error.code in (E.NONE, E.MEMBER_ID_REQUIRED):
            m.member_id = answer.member_id
        elif answer.error.code in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
            m.member_id = ""
        if answer.error.code == E.NONE:
            m.generation = answer.generation_id
            assignment = None
            if answer.leader == m.member_id and not answer.skip_assignment:
                assert answer.generation_id not in plans, (
                    f"two leaders assigned generation {answer.generation_id}"
                )
                assignment = {
                    x.member_id: f"{answer.generation_id}:{x.member_id}".encode() for x in answer.members
                }
                # Keyed by instance id for static members: a restarted one inherits its assignment (KIP-345).
                plans[answer.generation_id] = {
                    x.group_instance_id or x.member_id: assignment[x.member_id] for x in answer.members
                }
            m.sync_rid = h.sync(m.member_id, m.generation, assignment, instance_id=m.instance_id)
            sent.append(m.sync_rid)
        return
    if m.sync_rid is not None:
        answer = h.answers.get(m.sync_rid)
        if answer is None:
            return
        m.sync_rid = None
        assert isinstance(answer, SyncGroupResponse)
        if answer.error.code == E.NONE:
            plan = plans.get(m.generation)
            if plan is not None:  # a KIP-814 skip keeps the previous plan: nothing new to compare
                key = m.instance_id or m.member_id
                assert answer.assignment == plan.get(key, b""), (m.generation, key)
        return
    action = rng.random()
    if action < 0.25 or not m.member_id:
        m.join_rid = h.join(member_id=m.member_id, instance_id=m.instance_id)
        sent.append(m.join_rid)
    elif action < 0.6:
        code = h.heartbeat(m.member_id, m.generation, instance_id=m.instance_id)
        if code != E.NONE:
            m.join_rid = h.join(
                member_id="" if code == E.UNKNOWN_MEMBER_ID else m.member_id, instance_id=m.instance_id
            )
            sent.append(m.join_rid)
    elif action < 0.75:
        sent.append(
            h.commit(
                m.member_id,
                m.generation,
                {("t", rng.randrange(4)): rng.randrange(100)},
                instance_id=m.instance_id,
            )
        )
    elif action < 0.8:
        h.leave(m.member_id, m.instance_id)
        m.member_id, m.generation = "", -1
    elif action < 0.85 and m.instance_id is not None:  # a restart: a new incarnation, same instance id
        m.member_id = ""
        m.join_rid = h.join(instance_id=m.instance_id)
        sent.append(m.join_rid)


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed-{s}" for s in SEEDS])
def test_random_schedules_answer_everything_and_never_mix_generations(seed: int) -> None:
    rng = random.Random(seed)
    h = Harness(auto_append=False)
    members = [SimMember(i, static=rng.random() < 0.4) for i in range(MEMBERS)]
    sent: list[int] = []
    plans: dict[int, dict[str, bytes]] = {}
    for _ in range(STEPS):
        roll = rng.random()
        if roll < 0.6:
            step(h, rng, rng.choice(members), sent, plans)
        elif roll < 0.8:
            h.finish_appends(
                E.NONE
                if rng.random() < 0.85
                else rng.choice([E.NOT_ENOUGH_REPLICAS, E.REQUEST_TIMED_OUT, E.NOT_LEADER_OR_FOLLOWER])
            )
        else:
            h.advance(rng.choice([10, 100, 1_000, SESSION_MS // 2, SESSION_MS]))
    # Everyone leaves or goes silent; every timeout passes.
    for m in members:
        if rng.random() < 0.5 and m.member_id:
            h.leave(m.member_id, m.instance_id)
    for _ in range(4):
        h.finish_appends()
        h.advance(REBALANCE_MS + SESSION_MS)
    h.finish_appends()
    missing = [rid for rid in sent if rid not in h.answers]
    assert not missing, f"seed {seed}: requests never answered: {missing}"
    assert h.state(GROUP) in (GroupState.EMPTY, GroupState.DEAD), h.core.group_manager.groups.get(GROUP)
