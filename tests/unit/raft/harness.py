"""A tiny synchronous cluster for unit tests: cores, an instant network with a drop filter, a perfect disk.

``Cluster.settle()`` carries out every ``Ready`` in the documented order and delivers messages until
nothing moves; ``Cluster.tick_until`` advances the virtual clock. Persisting is instant (the simulator
in ``tests/sim/raft`` models slow and lossy disks).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from raft.core import RaftConfig, RaftNode, Role
from raft.messages import Entry, HardState, Message, ReadState, Snapshot, SnapshotMeta


@dataclass
class Disk:
    hard_state: HardState = field(default_factory=HardState)
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None


@dataclass
class Cluster:
    voters: list[int]
    observers: list[int] = field(default_factory=list)
    seed: int = 1
    config_overrides: dict = field(default_factory=dict)
    now_ms: int = 0
    nodes: dict[int, RaftNode] = field(default_factory=dict)
    disks: dict[int, Disk] = field(default_factory=dict)
    applied: dict[int, list[Entry]] = field(default_factory=dict)
    read_states: dict[int, list[ReadState]] = field(default_factory=dict)
    sent: list[Message] = field(default_factory=list)
    drop: Callable[[Message], bool] = lambda m: False

    def __post_init__(self) -> None:
        for node_id in self.voters + self.observers:
            self.disks[node_id] = Disk()
            self.start(node_id)

    def config(self, node_id: int) -> RaftConfig:
        base = {
            "node_id": node_id,
            "voters": frozenset(self.voters),
            "observers": frozenset(self.observers),
            "election_timeout_min_ms": 100,
            "election_timeout_max_ms": 200,
            "heartbeat_interval_ms": 20,
        }
        base.update(self.config_overrides)
        return RaftConfig(**base)

    def start(self, node_id: int) -> RaftNode:
        disk = self.disks[node_id]
        node = RaftNode(
            self.config(node_id),
            random.Random(self.seed * 1000 + node_id),
            hard_state=disk.hard_state,
            entries=list(disk.entries),
            snapshot=disk.snapshot,
            now_ms=self.now_ms,
        )
        self.nodes[node_id] = node
        self.applied[node_id] = []
        self.read_states[node_id] = []
        return node

    def leader(self) -> RaftNode | None:
        leaders = [n for n in self.nodes.values() if n.role is Role.LEADER]
        return max(leaders, key=lambda n: n.term) if leaders else None

    def handle_ready(self, node: RaftNode) -> list[Message]:
        ready = node.take_ready()
        disk = self.disks[node.id]
        out = list(ready.messages)
        if ready.truncate_from is not None:
            disk.entries = [e for e in disk.entries if e.index < ready.truncate_from]
        disk.entries.extend(ready.entries)
        if ready.hard_state is not None:
            disk.hard_state = ready.hard_state
        if ready.snapshot is not None:
            disk.snapshot = ready.snapshot
            disk.entries = [e for e in disk.entries if e.index > ready.snapshot.meta.last_index]
            self.applied[node.id] = [Entry(ready.snapshot.meta.last_term, ready.snapshot.meta.last_index)]
        out.extend(ready.messages_after_persist)
        if ready.entries:
            node.persisted(ready.entries[-1].index, ready.entries[-1].term)
        self.applied[node.id].extend(ready.committed)
        self.read_states[node.id].extend(ready.read_states)
        node.invariants()
        return out

    def settle(self, max_rounds: int = 10_000) -> None:
        """Carry out Readies and deliver messages (in order) until nothing is left."""
        queue: list[Message] = []
        for _ in range(max_rounds):
            for node in list(self.nodes.values()):
                if node.has_ready():
                    queue.extend(self.handle_ready(node))
            if not queue:
                return
            batch, queue = queue, []
            for m in batch:
                self.sent.append(m)
                if m.dst in self.nodes and not self.drop(m):
                    self.nodes[m.dst].step(m, self.now_ms)
        raise AssertionError("cluster did not settle")

    def advance(self, ms: int, step_ms: int = 5) -> None:
        end = self.now_ms + ms
        while self.now_ms < end:
            self.now_ms = min(end, self.now_ms + step_ms)
            for node in self.nodes.values():
                node.tick(self.now_ms)
            self.settle()

    def elect(self, node_id: int) -> RaftNode:
        """Make ``node_id`` campaign now and settle; returns it (asserting it won)."""
        node = self.nodes[node_id]
        self.now_ms = max(self.now_ms, node.next_deadline_ms() or self.now_ms)
        node.tick(self.now_ms)
        self.settle()
        assert node.role is Role.LEADER, f"node {node_id} did not win: {node.role} term {node.term}"
        return node

    def propose(self, node_id: int, *data: bytes):
        result = self.nodes[node_id].propose(list(data), self.now_ms)
        self.settle()
        return result

    def take_snapshot(self, node_id: int) -> Snapshot:
        node = self.nodes[node_id]
        index = node.applied_index
        snap = Snapshot(SnapshotMeta(index, node.term_at(index) or 0), b"state-at-%d" % index)
        node.snapshot_taken(snap)
        self.disks[node_id].snapshot = snap
        self.disks[node_id].entries = [e for e in self.disks[node_id].entries if e.index > index]
        return snap
