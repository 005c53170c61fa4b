"""A deterministic, seeded simulation of a Raft cluster (3 or 5 voters, maybe an observer) in one process.

One ``random.Random(seed)`` drives everything: the cluster shape, the fault rates, every delay, drop,
duplicate, partition, crash, restart, client proposal, read, snapshot and leadership transfer. Time is
virtual (an event queue ordered by ``(time_ms, sequence)``), so a seed replays exactly and the same
seed gives the same trace hash.

The simulated driver follows the ``Ready`` contract: send ``messages``; persist (a write that completes
after a random fsync delay — a crash before it completes LOSES it); then send ``messages_after_persist``,
report ``persisted``, apply ``committed``. A node takes its next ``Ready`` only after the previous one.

Checked after every event (``Checker``): each core's ``invariants()``; Election Safety (one leader per
term); Log Matching (an ``(index, term)`` pair always names the same entry with the same predecessor
term); Leader Completeness (a new leader holds every entry committed in an earlier term); State Machine
Safety (every node applies the same entry at an index, and restores the same state from a snapshot);
the commit index never decreases within a node's life; acknowledged proposals stay committed; a
ReadIndex answer is at least every index committed before the read began. After the faults stop:
liveness — a leader is elected and a new proposal commits within a bound — and all nodes converge.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from dataclasses import dataclass, field

from raft.core import RaftConfig, RaftNode, Role
from raft.messages import (
    AppendEntriesResponse,
    Entry,
    HardState,
    Message,
    ProposalAccepted,
    Ready,
    RequestVoteResponse,
    Snapshot,
    SnapshotMeta,
)

ELECTION_TIMEOUT_MIN_MS = 100
HEARTBEAT_INTERVAL_MS = 40
SNAPSHOT_CHUNK_BYTES = 24  # tiny, so snapshots travel in several chunks
LIVENESS_BOUND_MS = 1_500  # after faults stop: a leader and a fresh commit within this
CONVERGENCE_BOUND_MS = 2_000  # then every node applies the leader's commit index within this
MAX_EVENTS = 60_000  # a run that needs more is livelocked (or flooding the network): a failure


class SimFailure(AssertionError):
    """A safety or liveness violation; the message starts with the seed that replays it."""


@dataclass(frozen=True, slots=True)
class Faults:
    """The fault mix a seed draws: rates are per message or per scheduled opportunity."""

    voters: int
    observers: int
    drop: float
    duplicate: float
    delay_max_ms: int
    partitions: bool
    crashes: bool
    fault_phase_ms: int
    snapshot_every_ms: int
    transfer_every_ms: int
    fsync_max_ms: int  # a persist completes 0..fsync_max_ms after it starts; a crash before loses it
    fault_every_ms: int
    election_spread_ms: int  # election timeouts are drawn from [min, min + spread): small = split votes
    max_entries_per_append: int
    pre_vote: bool = True
    check_quorum: bool = True

    @classmethod
    def draw(cls, rng: random.Random) -> Faults:
        return cls(
            voters=rng.choice((3, 3, 5)),
            observers=rng.choice((0, 0, 1)),
            drop=rng.choice((0.0, 0.02, 0.1, 0.25)),
            duplicate=rng.choice((0.0, 0.02, 0.1)),
            delay_max_ms=rng.choice((2, 10, 40)),
            partitions=rng.random() < 0.6,
            crashes=rng.random() < 0.6,
            fault_phase_ms=rng.choice((400, 700, 1_000)),
            snapshot_every_ms=rng.choice((80, 250, 10_000)),
            transfer_every_ms=rng.choice((300, 10_000)),
            fsync_max_ms=rng.choice((1, 4, 15)),
            fault_every_ms=rng.choice((60, 150, 300)),
            election_spread_ms=rng.choice((10, 100)),
            max_entries_per_append=rng.choice((1, 3, 8)),
            pre_vote=rng.random() < 0.8,
            check_quorum=rng.random() < 0.8,
        )


@dataclass
class Disk:
    """What survives a crash: only writes whose persist step completed."""

    hard_state: HardState = field(default_factory=HardState)
    entries: list[Entry] = field(default_factory=list)
    snapshot: Snapshot | None = None

    def write(self, ready: Ready) -> None:
        if ready.truncate_from is not None:
            self.entries = [e for e in self.entries if e.index < ready.truncate_from]
        if ready.entries:
            first = ready.entries[0].index
            self.entries = [e for e in self.entries if e.index < first]
            self.entries.extend(ready.entries)
        if ready.hard_state is not None:
            self.hard_state = ready.hard_state
        if ready.snapshot is not None:
            self.install(ready.snapshot)

    def holds(self, index: int, term: int | None) -> bool:
        if self.snapshot is not None and self.snapshot.meta.last_index >= index:
            return True
        if not self.entries or not self.entries[0].index <= index <= self.entries[-1].index:
            return False
        return self.entries[index - self.entries[0].index].term == term

    def install(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.entries = [e for e in self.entries if e.index > snapshot.meta.last_index]


@dataclass
class StateMachine:
    """A hash chain over applied entries: equal digests at an index mean equal histories."""

    applied_index: int = 0
    digest: bytes = b""

    def apply(self, entry: Entry) -> None:
        assert entry.index == self.applied_index + 1, f"apply {entry.index} after {self.applied_index}"
        self.digest = hashlib.blake2b(self.digest + b"|%d|%d|" % (entry.term, entry.index) + entry.data,
                                      digest_size=16).digest()  # fmt: skip
        self.applied_index = entry.index

    def snapshot_bytes(self) -> bytes:
        return b"%d:" % self.applied_index + self.digest.hex().encode()

    @classmethod
    def restore(cls, data: bytes) -> StateMachine:
        index, _, digest = data.partition(b":")
        return cls(int(index), bytes.fromhex(digest.decode()))


@dataclass
class SimNode:
    node_id: int
    disk: Disk = field(default_factory=Disk)
    core: RaftNode | None = None
    sm: StateMachine = field(default_factory=StateMachine)
    incarnation: int = 0
    busy: bool = False  # a Ready's persist is in progress
    tick_at: int | None = None
    last_commit: int = 0
    last_role: Role = Role.FOLLOWER
    last_term: int = 0


class Checker:
    """Cluster-wide safety properties, fed by the simulator after every event."""

    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # term -> leader id (Election Safety)
        self.entries: dict[tuple[int, int], tuple[bytes, int]] = {}  # (index, term) -> (data, prev term)
        self.committed: dict[int, tuple[int, bytes]] = {}  # index -> (term, data)
        self.commit_by_term: dict[int, int] = {}  # leader term -> highest index it committed
        self.digests: dict[int, bytes] = {}  # index -> state machine digest (State Machine Safety)
        self.acked: dict[int, bytes] = {}  # index -> data of proposals reported committed to clients

    def fail(self, message: str) -> None:
        raise SimFailure(message)

    def leader_elected(self, node: RaftNode) -> None:
        other = self.leaders.setdefault(node.term, node.id)
        if other != node.id:
            self.fail(f"Election Safety: nodes {other} and {node.id} both lead term {node.term}")
        bound = max((i for t, i in self.commit_by_term.items() if t < node.term), default=0)
        for index in range(node.log.first_index, bound + 1):
            term, _ = self.committed[index]
            if node.log.term_at(index) != term:
                self.fail(
                    f"Leader Completeness: leader {node.id} of term {node.term} has term "
                    f"{node.log.term_at(index)} at committed index {index} (committed term {term})"
                )

    def entries_persisted(self, node: RaftNode, entries: list[Entry], prev_term: int | None) -> None:
        for entry in entries:
            key = (entry.index, entry.term)
            seen = self.entries.setdefault(key, (entry.data, prev_term))  # type: ignore[arg-type]
            if seen != (entry.data, prev_term) and prev_term is not None:
                self.fail(
                    f"Log Matching: node {node.id} holds {key} = {(entry.data, prev_term)}, others {seen}"
                )
            prev_term = entry.term

    def leader_committed(self, node: RaftNode, old: int) -> None:
        for index in range(max(old + 1, node.log.first_index), node.commit_index + 1):
            entry = node.log.entry(index)
            self.record_committed(node.id, entry)
        self.commit_by_term[node.term] = max(self.commit_by_term.get(node.term, 0), node.commit_index)

    def record_committed(self, node_id: int, entry: Entry) -> None:
        seen = self.committed.setdefault(entry.index, (entry.term, entry.data))
        if seen != (entry.term, entry.data):
            self.fail(
                f"State Machine Safety: node {node_id} commits {(entry.term, entry.data)} at "
                f"{entry.index}, others {seen}"
            )

    def applied(self, node_id: int, sm: StateMachine) -> None:
        seen = self.digests.setdefault(sm.applied_index, sm.digest)
        if seen != sm.digest:
            self.fail(f"State Machine Safety: node {node_id} state differs at index {sm.applied_index}")

    def max_committed(self) -> int:
        return max(self.committed, default=0)


@dataclass
class SimResult:
    seed: int
    trace_hash: str
    events: int
    elections: int
    committed: int
    acked: int
    reads: int
    snapshots_installed: int
    end_ms: int


class Simulation:
    """One seed's run; ``run()`` returns a ``SimResult`` or raises ``SimFailure`` naming the seed."""

    def __init__(self, seed: int, faults: Faults | None = None, echo: bool = False) -> None:
        self.seed = seed
        self.echo = echo  # print every trace line (replaying a failure)
        self.rng = random.Random(seed)
        self.faults = faults or Faults.draw(self.rng)
        f = self.faults
        self.voters = list(range(1, f.voters + 1))
        self.observers = list(range(f.voters + 1, f.voters + 1 + f.observers))
        self.nodes = {i: SimNode(i) for i in self.voters + self.observers}
        self.now = 0
        self.queue: list[tuple[int, int, str, object]] = []
        self.seq = 0
        self.blocked: set[tuple[int, int]] = set()
        self.faults_active = True
        self.check = Checker()
        self.trace = hashlib.sha256()
        self.events = 0
        self.proposed = 0
        self.pending: dict[tuple[int, int], tuple[bytes, int]] = {}  # (term, index) -> (data, proposed at)
        self.heal_at: int | None = None
        self.reads: dict[int, int] = {}  # request id -> highest committed index when the read began
        self.reads_served = 0
        self.snapshots_installed = 0
        self.elections = 0

    # ---- event queue -----------------------------------------------------------------------------

    def at(self, time_ms: int, kind: str, payload: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (time_ms, self.seq, kind, payload))

    def run(self) -> SimResult:
        try:
            return self._run()
        except AssertionError as exc:
            raise SimFailure(f"seed {self.seed} failed at t={self.now}ms ({self.faults}): {exc}") from exc

    def _run(self) -> SimResult:
        for node in self.nodes.values():
            self.start(node)
        self.at(self.rng.randrange(5, 30), "client")
        self.at(self.rng.randrange(50, 300), "fault")
        self.at(self.faults.snapshot_every_ms, "snapshot")
        self.at(self.faults.transfer_every_ms, "transfer")
        self.at(self.faults.fault_phase_ms, "heal")
        end = self.faults.fault_phase_ms + LIVENESS_BOUND_MS + CONVERGENCE_BOUND_MS
        self.liveness_ok_at: int | None = None
        self.heal_commit_floor = 0
        while self.queue:
            time_ms, _, kind, payload = heapq.heappop(self.queue)
            if time_ms > end:
                break
            self.now = time_ms
            self.events += 1
            if self.events > MAX_EVENTS:
                self.check.fail(f"{MAX_EVENTS} events by t={self.now}ms: livelock or message storm")
            getattr(self, "on_" + kind)(payload)
            if self.liveness_ok_at is not None and self.converged():
                break
        self.final_checks()
        return SimResult(
            self.seed, self.trace.hexdigest(), self.events, self.elections, self.check.max_committed(),
            len(self.check.acked), self.reads_served, self.snapshots_installed, self.now,
        )  # fmt: skip

    def note(self, text: str) -> None:
        self.trace.update(b"%d %s\n" % (self.now, text.encode()))
        if self.echo:
            print(f"{self.now:>6} {text}")

    # ---- nodes -------------------------------------------------------------------------------------

    def start(self, node: SimNode) -> None:
        node.incarnation += 1
        disk = node.disk
        config = RaftConfig(
            node_id=node.node_id,
            voters=frozenset(self.voters),
            observers=frozenset(self.observers),
            election_timeout_min_ms=ELECTION_TIMEOUT_MIN_MS,
            election_timeout_max_ms=ELECTION_TIMEOUT_MIN_MS + self.faults.election_spread_ms,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_inflight_appends=4,
            max_entries_per_append=self.faults.max_entries_per_append,
            snapshot_chunk_bytes=SNAPSHOT_CHUNK_BYTES,
            pre_vote=self.faults.pre_vote,
            check_quorum=self.faults.check_quorum,
        )
        rng = random.Random(self.rng.getrandbits(32))
        node.core = RaftNode(
            config, rng, hard_state=disk.hard_state, entries=list(disk.entries), snapshot=disk.snapshot,
            now_ms=self.now,
        )  # fmt: skip
        node.sm = StateMachine.restore(disk.snapshot.data) if disk.snapshot else StateMachine()
        node.busy = False
        node.tick_at = None
        node.last_commit = node.core.commit_index
        node.last_role, node.last_term = Role.FOLLOWER, node.core.term
        self.note(f"start {node.node_id}")
        self.after_event(node)

    def after_event(self, node: SimNode) -> None:
        """Check the node, run its driver loop, and keep its tick scheduled."""
        core = node.core
        assert core is not None
        self.observe(node)
        if not node.busy and core.has_ready():
            self.process_ready(node)
        deadline = core.next_deadline_ms()
        if deadline is not None and (node.tick_at is None or deadline < node.tick_at):
            node.tick_at = max(deadline, self.now + 1)
            self.at(node.tick_at, "tick", (node.node_id, node.incarnation))

    def observe(self, node: SimNode) -> None:
        core = node.core
        assert core is not None
        core.invariants()
        if core.commit_index < node.last_commit:
            self.check.fail(
                f"node {node.node_id}: commit index fell from {node.last_commit} to {core.commit_index}"
            )
        if core.role is Role.LEADER:
            if node.last_role is not Role.LEADER or node.last_term != core.term:
                self.elections += 1
                self.note(f"leader {node.node_id} term {core.term}")
                self.check.leader_elected(core)
            if core.commit_index > node.last_commit or node.last_role is not Role.LEADER:
                self.check.leader_committed(core, node.last_commit)
                if core.commit_index > node.last_commit:
                    self.check_durable_majority(core)
        node.last_commit, node.last_role, node.last_term = core.commit_index, core.role, core.term

    def check_durable_majority(self, core: RaftNode) -> None:
        """Committed means on the disks of a majority of voters — checked on the disks themselves."""
        index, term = core.commit_index, core.term_at(core.commit_index)
        holders = [v for v in self.voters if self.nodes[v].disk.holds(index, term)]
        if len(holders) < len(self.voters) // 2 + 1:
            self.check.fail(
                f"leader {core.id} committed index {index} (term {term}) but only {holders} have it on disk"
            )

    def process_ready(self, node: SimNode) -> None:
        core = node.core
        assert core is not None
        ready = core.take_ready()
        for m in ready.messages:
            self.check_sendable_before_persist(node.node_id, m)
            self.send(m)
        if ready.entries:
            self.check.entries_persisted(core, ready.entries, core.term_at(ready.entries[0].index - 1))
        writes = ready.entries or ready.hard_state or ready.snapshot or ready.truncate_from is not None
        if writes:
            node.busy = True
            self.at(
                self.now + self.rng.randrange(0, self.faults.fsync_max_ms + 1),
                "persisted",
                (node.node_id, node.incarnation, ready),
            )
        else:
            self.finish_ready(node, ready)

    def check_sendable_before_persist(self, node_id: int, m: Message) -> None:
        """The Ready contract from outside: a granted vote or an append acknowledgement promises
        durable state, so it must wait in messages_after_persist."""
        if isinstance(m, RequestVoteResponse) and m.granted and not m.pre_vote:
            self.check.fail(f"node {node_id} grants a vote before persisting it: {m}")
        if isinstance(m, AppendEntriesResponse) and m.success:
            self.check.fail(f"node {node_id} acknowledges entries before persisting them: {m}")

    def finish_ready(self, node: SimNode, ready: Ready) -> None:
        core = node.core
        assert core is not None
        node.disk.write(ready)
        for m in ready.messages_after_persist:
            self.send(m)
        if ready.entries:
            core.persisted(ready.entries[-1].index, ready.entries[-1].term)
        if ready.snapshot is not None:
            node.sm = StateMachine.restore(ready.snapshot.data)
            self.snapshots_installed += 1
            self.check.applied(node.node_id, node.sm)
        for entry in ready.committed:
            node.sm.apply(entry)
            self.check.record_committed(node.node_id, entry)
            self.check.applied(node.node_id, node.sm)
            self.maybe_ack(core, entry)
        for rs in ready.read_states:
            floor = self.reads.pop(rs.request_id)
            if rs.index < floor:
                self.check.fail(f"ReadIndex {rs.request_id} at {rs.index} misses committed index {floor}")
            self.reads_served += 1
        for request_id, _leader in ready.rejected_reads:
            self.reads.pop(request_id)
        node.busy = False

    def maybe_ack(self, core: RaftNode, entry: Entry) -> None:
        pending = self.pending.pop((entry.term, entry.index), None)
        if pending is not None:
            data, proposed_at = pending
            assert data == entry.data, (
                f"proposal at {entry.index} term {entry.term}: {data!r} != {entry.data!r}"
            )
            self.check.acked[entry.index] = data
            if self.heal_at is not None and proposed_at >= self.heal_at and self.liveness_ok_at is None:
                self.liveness_ok_at = self.now
                self.note("liveness")

    # ---- network -----------------------------------------------------------------------------------

    def send(self, m: Message) -> None:
        f = self.faults
        if self.faults_active and self.rng.random() < f.drop:
            return
        copies = 2 if self.faults_active and self.rng.random() < f.duplicate else 1
        for _ in range(copies):
            self.at(self.now + self.rng.randrange(1, f.delay_max_ms + 1), "deliver", m)

    def on_deliver(self, m: Message) -> None:
        node = self.nodes[m.dst]
        if node.core is None or (m.src, m.dst) in self.blocked:
            return
        self.note(f"{type(m).__name__} {m.src}>{m.dst} t{m.term}")
        node.core.step(m, self.now)
        self.after_event(node)

    def on_tick(self, payload: object) -> None:
        node_id, incarnation = payload  # type: ignore[misc]
        node = self.nodes[node_id]
        if node.core is None or node.incarnation != incarnation or node.tick_at != self.now:
            return
        node.tick_at = None
        node.core.tick(self.now)
        self.after_event(node)

    def on_persisted(self, payload: object) -> None:
        node_id, incarnation, ready = payload  # type: ignore[misc]
        node = self.nodes[node_id]
        if node.core is None or node.incarnation != incarnation:
            return  # the node crashed before the write completed: it is lost
        self.finish_ready(node, ready)
        self.after_event(node)

    # ---- faults and clients ------------------------------------------------------------------------

    def on_fault(self, _: object) -> None:
        if not self.faults_active:
            return
        f, rng = self.faults, self.rng
        choice = rng.random()
        ids = list(self.nodes)
        if f.partitions and choice < 0.4:
            self.partition(rng.sample(ids, rng.randrange(1, len(ids) // 2 + 1)), symmetric=rng.random() < 0.6)
        elif f.crashes and choice < 0.8:
            victim = self.nodes[rng.choice(self.crash_candidates())]
            if victim.core is not None:
                self.note(f"crash {victim.node_id}")
                victim.core = None
                victim.busy = False
                self.at(self.now + rng.randrange(10, 300), "restart", victim.node_id)
        else:
            self.blocked.clear()
            self.note("heal links")
        self.at(self.now + rng.randrange(f.fault_every_ms // 2, f.fault_every_ms * 2), "fault")

    def crash_candidates(self) -> list[int]:
        """Bias crashes to where they hurt: a node with an unsynced write, or the leader."""
        roll = self.rng.random()
        busy = [i for i, n in self.nodes.items() if n.core is not None and n.busy]
        if busy and roll < 0.4:
            return busy
        leaders = [i for i, n in self.nodes.items() if n.core is not None and n.core.role is Role.LEADER]
        if leaders and roll < 0.7:
            return leaders
        return list(self.nodes)

    def partition(self, group: list[int], symmetric: bool) -> None:
        others = [i for i in self.nodes if i not in group]
        for a in group:
            for b in others:
                self.blocked.add((b, a))
                if symmetric:
                    self.blocked.add((a, b))
        self.note(f"partition {sorted(group)} {'sym' if symmetric else 'asym'}")

    def on_restart(self, node_id: object) -> None:
        node = self.nodes[node_id]  # type: ignore[index]
        if node.core is None:
            self.start(node)

    def on_heal(self, _: object) -> None:
        self.faults_active = False
        self.blocked.clear()
        self.note("heal all")
        for node in self.nodes.values():
            if node.core is None:
                self.start(node)
        self.heal_at = self.now

    def on_client(self, _: object) -> None:
        if self.liveness_ok_at is not None:
            return  # liveness shown: clients stop so the replicas can converge
        rng = self.rng
        target = self.nodes[rng.choice(self.voters)]
        leaders = [n for n in self.nodes.values() if n.core is not None and n.core.role is Role.LEADER]
        if leaders and rng.random() < 0.8:
            target = max(leaders, key=lambda n: n.core.term)  # type: ignore[union-attr]
        core = target.core
        if core is not None:
            if rng.random() < 0.15:
                self.proposed += 1
                if core.read_index(self.proposed, self.now) is None:
                    self.reads[self.proposed] = self.check.max_committed()
            else:
                self.propose(core, rng.randrange(1, 4))
            self.after_event(target)
        self.at(self.now + rng.randrange(5, 40), "client")

    def propose(self, core: RaftNode, count: int) -> None:
        data = []
        for _ in range(count):
            self.proposed += 1
            data.append(b"p%d" % self.proposed)
        result = core.propose(data, self.now)
        if isinstance(result, ProposalAccepted):
            for offset, index in enumerate(range(result.first_index, result.last_index + 1)):
                self.pending[(result.term, index)] = (data[offset], self.now)

    def on_snapshot(self, _: object) -> None:
        live = [n for n in self.nodes.values() if n.core is not None and not n.busy]
        if live:
            node = self.rng.choice(live)
            core = node.core
            assert core is not None
            index = node.sm.applied_index
            if index > core.log.snapshot_meta.last_index and index == core.applied_index:
                meta = SnapshotMeta(index, core.term_at(index))  # type: ignore[arg-type]
                snapshot = Snapshot(meta, node.sm.snapshot_bytes())
                core.snapshot_taken(snapshot)
                node.disk.install(snapshot)
                self.note(f"snapshot {node.node_id} at {index}")
                self.after_event(node)
        self.at(self.now + self.faults.snapshot_every_ms, "snapshot")

    def on_transfer(self, _: object) -> None:
        for node in self.nodes.values():
            if node.core is not None and node.core.role is Role.LEADER:
                target = self.rng.choice([v for v in self.voters if v != node.node_id] or [node.node_id])
                node.core.transfer_leadership(target, self.now)
                self.note(f"transfer {node.node_id}->{target}")
                self.after_event(node)
        self.at(self.now + self.faults.transfer_every_ms, "transfer")

    # ---- end of run ---------------------------------------------------------------------------------

    def converged(self) -> bool:
        leaders = [n.core for n in self.nodes.values() if n.core is not None and n.core.role is Role.LEADER]
        if not leaders:
            return False
        commit = max(leaders, key=lambda c: c.term).commit_index
        return all(n.sm.applied_index == commit and not n.busy for n in self.nodes.values())

    def describe(self) -> list[tuple]:
        """(id, role, term, commit index, applied index) of every node, for failure messages."""
        return [
            (n.node_id, n.core.role.value, n.core.term, n.core.commit_index, n.sm.applied_index)
            if n.core
            else (n.node_id, "down")
            for n in self.nodes.values()
        ]

    def final_checks(self) -> None:
        if self.liveness_ok_at is None or self.liveness_ok_at - (self.heal_at or 0) > LIVENESS_BOUND_MS:
            self.check.fail(
                f"liveness: no proposal committed within {LIVENESS_BOUND_MS}ms after faults stopped "
                f"(nodes: {self.describe()})"
            )
        if not self.converged():
            self.check.fail(
                f"convergence: nodes did not all apply the leader's commit index: {self.describe()}"
            )
        for index, data in self.check.acked.items():
            term, committed = self.check.committed[index]
            if committed != data:
                self.check.fail(
                    f"acknowledged proposal {data!r} at {index} became {committed!r} (term {term})"
                )
        lowest = min(n.sm.applied_index for n in self.nodes.values())
        if self.check.acked and lowest < max(self.check.acked):
            self.check.fail(f"acknowledged index {max(self.check.acked)} missing: {self.describe()}")
        digests = {n.sm.digest for n in self.nodes.values()}
        if len(digests) != 1:
            self.check.fail(
                f"final states differ: {[(n.node_id, n.sm.applied_index) for n in self.nodes.values()]}"
            )


def run_seed(seed: int) -> SimResult:
    return Simulation(seed).run()
