"""The leader's view of one peer's log (Raft §5.3 ``nextIndex``/``matchIndex``), with flow control.

States (etcd-raft's names):

* ``PROBE``     — the leader does not know where the peer's log diverges: it sends one AppendEntries,
  then waits for the answer (or the next heartbeat) before sending another.
* ``REPLICATE`` — the peer accepted the last probe: the leader pipelines AppendEntries, optimistically
  advancing ``next_index`` past what it sent, with at most ``max_inflight`` messages unacknowledged.
* ``SNAPSHOT``  — the entries the peer needs are compacted away: the leader streams the snapshot in
  chunks, one chunk outstanding at a time, then probes from ``snapshot.last_index + 1``.

Invariants: ``0 <= match_index < next_index``; inflight last-indexes strictly increase and lie in
``(match_index, next_index)``.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from raft.messages import SnapshotMeta


class PeerState(enum.Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


@dataclass(slots=True)
class Progress:
    next_index: int
    match_index: int = 0
    state: PeerState = PeerState.PROBE
    probe_sent: bool = False  # PROBE: a probe is outstanding; wait for its answer or the next heartbeat
    inflight: deque[int] = field(default_factory=deque)  # last index of each unacknowledged append
    recent_active: bool = False  # CheckQuorum: heard from since the last check
    progress_ms: int = 0  # when the peer last made progress (or the state was reset): stall detection
    snapshot_meta: SnapshotMeta | None = None  # SNAPSHOT: which snapshot is being sent
    snapshot_offset: int = 0  # SNAPSHOT: the next byte the peer expects
    snapshot_sent: bool = False  # SNAPSHOT: a chunk is outstanding

    def become_probe(self) -> None:
        """Back to probing from ``match_index + 1`` (or from just after an installed snapshot)."""
        if self.state is PeerState.SNAPSHOT and self.snapshot_meta is not None:
            self.next_index = max(self.match_index, self.snapshot_meta.last_index) + 1
        else:
            self.next_index = self.match_index + 1
        self._reset(PeerState.PROBE)

    def become_replicate(self) -> None:
        self.next_index = self.match_index + 1
        self._reset(PeerState.REPLICATE)

    def become_snapshot(self, meta: SnapshotMeta) -> None:
        self._reset(PeerState.SNAPSHOT)
        self.snapshot_meta = meta

    def _reset(self, state: PeerState) -> None:
        self.state = state
        self.probe_sent = False
        self.inflight.clear()
        self.snapshot_meta = None
        self.snapshot_offset = 0
        self.snapshot_sent = False

    def is_paused(self, max_inflight: int) -> bool:
        if self.state is PeerState.PROBE:
            return self.probe_sent
        if self.state is PeerState.REPLICATE:
            return len(self.inflight) >= max_inflight
        return True  # SNAPSHOT: appends wait until the snapshot is installed

    def sent_append(self, last_index: int, count: int) -> None:
        """Record an AppendEntries carrying entries up to ``last_index`` (``count`` of them)."""
        if self.state is PeerState.REPLICATE:
            if count:
                self.next_index = last_index + 1
                self.inflight.append(last_index)
        else:
            self.probe_sent = True

    def maybe_update(self, match_index: int) -> bool:
        """A successful append up to ``match_index``; returns True if the match advanced."""
        self.probe_sent = False
        while self.inflight and self.inflight[0] <= match_index:
            self.inflight.popleft()
        if match_index <= self.match_index:
            return False
        self.match_index = match_index
        self.next_index = max(self.next_index, match_index + 1)
        return True

    def maybe_back_off(self, next_index: int) -> bool:
        """A rejected append: retry from ``next_index`` (never at or below the known match)."""
        candidate = max(self.match_index + 1, next_index)
        if self.state is PeerState.REPLICATE:
            self.become_probe()
            self.next_index = candidate
            return True
        if self.state is PeerState.PROBE:
            self.next_index = candidate
            self.probe_sent = False
            return True
        return False

    def invariants(self, peer: int) -> None:
        assert 0 <= self.match_index < self.next_index, (
            f"peer {peer}: match {self.match_index} next {self.next_index}"
        )
        last = self.match_index
        for idx in self.inflight:
            assert last < idx < self.next_index, (
                f"peer {peer}: inflight {list(self.inflight)} outside ({self.match_index}, {self.next_index})"
            )
            last = idx
