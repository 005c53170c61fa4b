"""ReadIndex bookkeeping for linearizable reads (Raft thesis §6.4), owned by the leader's core.

A read is served at a *read index* without writing to the log:

1. the leader must have committed an entry of its own term (its NOOP), so its commit index is at least
   every index committed by earlier leaders; until then reads wait (``context == NO_READ_CONTEXT``);
2. the read index is the commit index when the read is started, and the read gets a *context*: a
   number that only grows during this node's life;
3. the leader sends a heartbeat round carrying the newest context; a voter's answer carrying context
   ``c`` (in the leader's term) proves the leader was still leader when it sent ``c``, so it confirms
   every read with a context ``<= c``;
4. once a majority (the leader included) confirmed a read, it is released as a ``ReadState``; the
   user serves it after applying up to its index. Reads are released in arrival order.

If the node stops leading, every pending read fails (the driver answers NOT_LEADER).
Invariants: contexts of started reads never decrease along the queue; started reads precede waiting ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raft.messages import ReadState

NO_READ_CONTEXT = 0


@dataclass(slots=True)
class PendingRead:
    request_id: int
    index: int = 0
    context: int = NO_READ_CONTEXT  # NO_READ_CONTEXT until the leader has committed in its term
    acks: set[int] = field(default_factory=set)


class ReadOnly:
    """The leader's queue of ReadIndex requests; see the module docstring."""

    __slots__ = ("_last_context", "_pending", "heartbeat_needed")

    def __init__(self) -> None:
        self._pending: list[PendingRead] = []
        self._last_context = NO_READ_CONTEXT
        self.heartbeat_needed = False  # a new context must be confirmed by a heartbeat round

    @property
    def last_context(self) -> int:
        return self._last_context

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, request_id: int, leader_id: int) -> None:
        self._pending.append(PendingRead(request_id, acks={leader_id}))

    def start_waiting(self, commit_index: int, quorum: int) -> list[ReadState]:
        """Step 2 for every waiting read: one new context and read index for all of them."""
        waiting = [r for r in self._pending if r.context == NO_READ_CONTEXT]
        if not waiting:
            return []
        self._last_context += 1
        for read in waiting:
            read.context, read.index = self._last_context, commit_index
        self.heartbeat_needed = True
        return self.release(quorum)

    def ack(self, voter: int, context: int, quorum: int) -> list[ReadState]:
        """Step 3: ``voter`` answered a message carrying ``context``."""
        for read in self._pending:
            if read.context != NO_READ_CONTEXT and read.context <= context:
                read.acks.add(voter)
        return self.release(quorum)

    def release(self, quorum: int) -> list[ReadState]:
        """Step 4: the confirmed reads at the head of the queue."""
        released = []
        while self._pending:
            read = self._pending[0]
            if read.context == NO_READ_CONTEXT or len(read.acks) < quorum:
                break
            released.append(ReadState(read.request_id, read.index))
            self._pending.pop(0)
        return released

    def fail_all(self) -> list[int]:
        """The node stopped leading: the request ids of every pending read."""
        failed = [r.request_id for r in self._pending]
        self._pending = []
        self.heartbeat_needed = False
        return failed
