"""The group half of ``pykraft.consumer.Consumer``: subscribe, commit, committed, and the hooks the
group driver (``pykraft.group_client.GroupClient``) calls during a rebalance.

A mixin: ``Consumer`` owns the partition states, the record buffer and the metadata cache; this
module decides what the group changes in them. The rules (Kafka's ``KafkaConsumer`` and
``ConsumerCoordinator``) are in ``pykraft.consumer``'s docstring. Not thread-safe, like the
consumer; the hooks run on the consumer's thread inside ``poll``, except ``partition_counts`` and
``broker_addresses`` (the group's heartbeat thread, which handles the JoinGroup answer).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import TYPE_CHECKING

from proto import errors
from proto.errors import ErrorCode
from pykraft.assignors import tp_key
from pykraft.connection import fetch_metadata
from pykraft.consumer_coordinator import AssignmentChange, CommitFailedError
from pykraft.types import TopicPartition

if TYPE_CHECKING:
    from pykraft.consumer import Consumer

log = logging.getLogger("pykraft.consumer")

InvalidGroupIdError = errors.exception_class(ErrorCode.INVALID_GROUP_ID)
IllegalStateError = errors.exception_class(ErrorCode.INVALID_REQUEST)


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class GroupConsumerMixin:
    """Group membership for ``Consumer`` (see the module docstring)."""

    # ---- public API ---------------------------------------------------------------------------------

    def subscribe(
        self: Consumer,
        topics: Iterable[str] | str | re.Pattern[str],
        on_assign=None,
        on_revoke=None,
    ) -> None:
        """Join the group for ``topics``: a list of names, or a regex (a compiled pattern, or a string
        starting with ``^`` like librdkafka) matched against every topic at each metadata refresh.
        ``on_assign(partitions)`` / ``on_revoke(partitions)`` run inside ``poll`` (revoke first)."""
        group = self._require_group("subscribe()")
        if self._states and not group.core.subscribed:
            raise IllegalStateError(
                "subscribe() after assign(): call assign([]) first (they exclude each other)"
            )
        pattern = topics if isinstance(topics, re.Pattern) else None
        if isinstance(topics, str):
            pattern = re.compile(topics) if topics.startswith("^") else None
            topics = [topics] if pattern is None else []
        self._on_assign, self._on_revoke = on_assign, on_revoke
        with group.lock:
            if pattern is not None:
                group.core.subscribe_pattern(pattern, self._all_topic_names())
            else:
                names = list(topics)
                if not names or any(not t for t in names):
                    raise ValueError(
                        f"subscribe() needs topic names, got {names!r}; use unsubscribe() to stop"
                    )
                group.core.subscribe(names)
        self._metadata.add_topics(set(group.core.subscription))

    def subscription(self: Consumer) -> set[str]:
        return set(self._group.core.subscription) if self._group is not None else set()

    def unsubscribe(self: Consumer) -> None:
        """Commit (auto-commit), revoke everything, and leave the group."""
        group = self._group
        if group is None or not group.core.subscribed:
            return
        self._maybe_commit_before_revoke(self._consumed_offsets())
        group.unsubscribe()
        self._revoke(sorted(self._states, key=tp_key))  # what poll() assigned; queued ones dropped
        group.leave_group("the consumer unsubscribed")

    def commit(
        self: Consumer,
        offsets: Mapping[TopicPartition, int] | None = None,
        asynchronous: bool = False,
        timeout_ms: int | None = None,
    ) -> Future | None:
        """Commit ``offsets`` (each the *next* offset to read), by default the consumed position of
        every assigned partition. Sync: returns when committed, raises ``CommitFailedError`` when the
        group rebalanced meanwhile. Async: returns a Future of the committed offsets."""
        group = self._require_group("commit()")
        consumed = self._consumed_offsets()
        offsets = dict(consumed if offsets is None else offsets)
        for tp, offset in offsets.items():
            if offset < 0:
                raise ValueError(f"commit(): offset {offset} of {tp} is negative")
        # An offset at the consumed position goes with the epoch of the record before it (KIP-320).
        epochs = self._consumed_epochs({tp: o for tp, o in offsets.items() if consumed.get(tp) == o})
        if asynchronous:
            return group.commit_async(offsets, epochs)
        deadline = _now_ms() + (self.request_timeout_ms if timeout_ms is None else timeout_ms)
        group.commit_sync(offsets, deadline, epochs)
        return None

    def committed(
        self: Consumer, partitions: Iterable[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offset of each partition (None where nothing is committed)."""
        group = self._require_group("committed()")
        deadline = _now_ms() + (self.request_timeout_ms if timeout_ms is None else timeout_ms)
        return {
            tp: (c.offset if c else None) for tp, c in group.fetch_committed(partitions, deadline).items()
        }

    def member_id(self: Consumer) -> str:
        return self._group.core.generation.member_id if self._group is not None else ""

    def generation_id(self: Consumer) -> int:
        return self._group.core.generation.generation_id if self._group is not None else -1

    # ---- poll -----------------------------------------------------------------------------------------

    def _group_poll(self: Consumer, deadline_ms: int) -> bool:
        """Auto-commit when due, follow the pattern and partition counts, (re)join; False when the
        member has nothing to fetch before ``deadline_ms`` (still joining, owning nothing)."""
        group = self._group
        assert group is not None, "_group_poll without a group"
        now = _now_ms()
        if self.enable_auto_commit and now >= self._next_auto_commit_ms:
            self._next_auto_commit_ms = now + self.auto_commit_interval_ms
            self._auto_commit_async()
        if self._metadata.needs_refresh(now):
            self._refresh_metadata()
            if group.core.pattern is not None:
                names = self._all_topic_names()
                with group.lock:
                    group.core.match_pattern(names)
                self._metadata.add_topics(set(group.core.subscription))
            counts = {
                t: c for t in group.core.subscription if (c := self._metadata.partition_count(t)) is not None
            }
            with group.lock:
                group.core.on_partition_counts(counts)
        # A member that owns partitions during a rebalance (cooperative) keeps fetching them: it only
        # checks on its JoinGroup/SyncGroup; one that owns nothing waits for the group up to the deadline.
        if not group.ensure_active_group(now if self._states else deadline_ms):
            return bool(self._states)
        self._fetch_committed_positions(deadline_ms)
        return True

    def _auto_commit_async(self: Consumer) -> None:
        offsets = self._consumed_offsets()
        if not offsets:
            return
        future = self._group.commit_async(offsets, self._consumed_epochs(offsets))

        def report(f: Future) -> None:
            error = f.exception()
            if error is not None:
                log.warning("auto-commit of %d partition(s) failed: %s", len(offsets), error)

        future.add_done_callback(report)

    def _fetch_committed_positions(self: Consumer, deadline_ms: int) -> None:
        waiting = [tp for tp, state in self._states.items() if state.awaiting_committed]
        if not waiting:
            return
        try:
            committed = self._group.fetch_committed(
                waiting, max(deadline_ms, _now_ms() + self.retry_backoff_ms)
            )
        except errors.KafkaError as exc:
            if not exc.retriable:
                raise
            log.info("OffsetFetch failed (%s); retrying on the next poll", exc)
            return
        for tp, found in committed.items():
            state = self._states.get(tp)
            if state is None or not state.awaiting_committed:
                continue
            state.awaiting_committed = False
            if found is not None and state.position is None and state.reset_to is None:
                # KIP-320: the first fetch carries the committed epoch, so a log truncated below the
                # committed offset (unclean election) is detected instead of silently skipped.
                epoch = found.leader_epoch if found.leader_epoch >= 0 else None
                state.position, state.last_fetched_epoch, state.consumed_epoch = found.offset, epoch, epoch

    def _consumed_offsets(self: Consumer) -> dict[TopicPartition, int]:
        """Per assigned partition, the offset after the last record poll returned (Kafka's
        ``allConsumed``): the first buffered record's offset, else the fetch position."""
        offsets: dict[TopicPartition, int] = {}
        for record in self._buffer:
            tp = TopicPartition(record.topic, record.partition)
            if tp not in offsets:
                offsets[tp] = record.offset
        for tp, state in self._states.items():
            if tp not in offsets and state.position is not None and not state.awaiting_committed:
                offsets[tp] = state.position
        return {tp: o for tp, o in offsets.items() if tp in self._states}

    def _consumed_epochs(self: Consumer, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The leader epoch of the last record returned before each consumed position, where known."""
        epochs = {tp: self._states[tp].consumed_epoch for tp in offsets if tp in self._states}
        return {tp: epoch for tp, epoch in epochs.items() if epoch is not None}

    def _maybe_commit_before_revoke(self: Consumer, offsets: Mapping[TopicPartition, int]) -> None:
        if not self.enable_auto_commit or not offsets:
            return
        try:
            self._group.commit_sync(
                offsets, _now_ms() + self.request_timeout_ms, self._consumed_epochs(offsets)
            )
        except errors.KafkaError as exc:  # CommitFailedError included: another member may own them now
            log.warning("commit before revoking %d partition(s) failed: %s", len(offsets), exc)

    # ---- hooks called by GroupClient --------------------------------------------------------------

    def broker_addresses(self: Consumer) -> list[str]:
        return [*self._metadata.broker_addresses(), *self._bootstrap]

    def partition_counts(self: Consumer, topics: set[str]) -> dict[str, int]:
        """The partition count of each existing topic of ``topics``, asked of the brokers. Called on
        the group's heartbeat thread, so it leaves the metadata cache (the consumer thread's) alone."""
        if not topics:
            return {}
        response = fetch_metadata(
            self._connections, self.broker_addresses(), sorted(topics), self.request_timeout_ms / 1000
        )
        return {t.name: len(t.partitions) for t in response.topics if t.error.code == ErrorCode.NONE}

    def on_join_prepare(self: Consumer, change: AssignmentChange) -> None:
        """Kafka's onJoinPrepare: commit everything consumed (unless the partitions are lost), then
        revoke what the protocol gives up before joining."""
        if not change.lost:
            self._maybe_commit_before_revoke(self._consumed_offsets())
        self._revoke([*change.revoked, *change.lost])

    def on_partitions_revoked(self: Consumer, change: AssignmentChange) -> None:
        """A cooperative assignment took ``change.revoked`` away: commit them, then revoke."""
        self._maybe_commit_before_revoke(
            {tp: o for tp, o in self._consumed_offsets().items() if tp in set(change.revoked)}
        )
        self._revoke([*change.revoked, *change.lost])

    def _revoke(self: Consumer, gone: list[TopicPartition]) -> None:
        if not gone:
            return
        for tp in gone:
            self._states.pop(tp, None)
            self._drop_buffered(tp)
        log.info("revoked %s", [f"{tp.topic}-{tp.partition}" for tp in gone])
        if self._on_revoke is not None:
            self._on_revoke(list(gone))

    def on_partitions_assigned(self: Consumer, added: tuple[TopicPartition, ...]) -> None:
        for tp in added:
            state = self._states.setdefault(tp, self._new_partition_state())
            state.awaiting_committed = True
        self._metadata.add_topics({tp.topic for tp in added})
        if self._on_assign is not None:
            self._on_assign(list(added))

    # ---- helpers ----------------------------------------------------------------------------------

    def _require_group(self: Consumer, what: str):
        if self._group is None:
            raise InvalidGroupIdError(
                f"{what} needs a consumer group: create the Consumer with group_id=... "
                "(group management and offset commits belong to a group)"
            )
        if self._closed:
            raise IllegalStateError(f"{what} after close()")
        return self._group

    def _all_topic_names(self: Consumer) -> list[str]:
        try:
            response = fetch_metadata(
                self._connections, self.broker_addresses(), [], self.request_timeout_ms / 1000
            )
        except errors.KafkaError as exc:
            log.debug("metadata for the subscription pattern failed: %s", exc)
            return list(self._group.core.subscription)
        self._metadata.update(response, _now_ms())
        return [t.name for t in response.topics if t.error.code == ErrorCode.NONE]

    def _close_group(self: Consumer) -> None:
        """Kafka's close: commit (auto-commit), revoke, leave (dynamic members), stop heartbeats."""
        group = self._group
        assert group is not None, "_close_group without a group"
        try:
            if group.core.subscribed:
                self._maybe_commit_before_revoke(self._consumed_offsets())
                owned = sorted(self._states, key=tp_key)  # what poll() assigned
                if owned and self._on_revoke is not None:
                    self._on_revoke(owned)
                group.leave_group("the consumer is closing")
        except CommitFailedError as exc:  # pragma: no cover - _maybe_commit_before_revoke logs these
            log.warning("close: %s", exc)
        finally:
            group.close()
