"""KIP-227 incremental fetch sessions (proto.kafka.fetch_session): the leader's cache and the follower's
handler, each alone and the two talking to each other."""

from __future__ import annotations

import random

import pytest

from proto.errors import ErrorCode
from proto.kafka.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    NO_SESSION_ID,
    FetchSessionCache,
    FetchSessionHandler,
    PartitionFetchRequest,
    SentPartitionState,
)

A, B, C = ("t", 0), ("t", 1), ("u", 0)
FOLLOWER = 102


def state(offset: int, epoch: int = 1) -> PartitionFetchRequest:
    return PartitionFetchRequest(offset, epoch, epoch, 1 << 20, "id")


def cache(max_sessions: int = 10) -> FetchSessionCache:
    return FetchSessionCache(random.Random(7), max_sessions)


def test_sessionless_request_opens_nothing_and_lists_what_it_asks() -> None:
    """(0, -1) is librdkafka's request: answered in full, session id 0, nothing cached."""
    c = cache()
    context = c.new_context(-1, NO_SESSION_ID, FINAL_EPOCH, {A: state(0)}, [])
    assert (context.error, context.session_id, context.incremental) == (ErrorCode.NONE, NO_SESSION_ID, False)
    assert context.partitions == {A: state(0)} and len(c) == 0


def test_incremental_request_fetches_the_whole_session_with_updates_and_forgotten() -> None:
    c = cache()
    full = c.new_context(FOLLOWER, NO_SESSION_ID, INITIAL_EPOCH, {A: state(0), B: state(5)}, [])
    assert full.session_id != NO_SESSION_ID and not full.incremental
    step = c.new_context(FOLLOWER, full.session_id, 1, {A: state(3), C: state(0)}, [B])
    assert step.incremental and step.partitions == {A: state(3), C: state(0)}
    again = c.new_context(FOLLOWER, full.session_id, 2, {}, [])
    assert again.partitions == {A: state(3), C: state(0)}, "unlisted partitions keep their cached state"
    c.invariants()


@pytest.mark.parametrize(
    ("replica_id", "session_id", "epoch", "code"),
    [
        (FOLLOWER, 12345, 1, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
        (103, None, 1, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
        (FOLLOWER, None, 2, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
        (FOLLOWER, None, 0, ErrorCode.NONE),
    ],
    ids=["unknown-id", "another-replicas-session", "epoch-skipped", "epoch-0-reopens"],
)
def test_session_errors(replica_id: int, session_id: int | None, epoch: int, code: ErrorCode) -> None:
    """An unknown session (or another replica's) and a wrong epoch are refused with no partitions, and a
    message telling the follower to send a full request."""
    c = cache()
    opened = c.new_context(FOLLOWER, NO_SESSION_ID, INITIAL_EPOCH, {A: state(0)}, [])
    context = c.new_context(
        replica_id, opened.session_id if session_id is None else session_id, epoch, {}, []
    )
    assert context.error == code
    if code != ErrorCode.NONE:
        assert context.partitions == {} and "full fetch request" in context.message
    else:
        assert context.session_id != opened.session_id and len(c) == 1, "(X, 0) closes X, opens another"


def test_eviction_keeps_at_most_max_sessions_least_recently_used_first() -> None:
    c = cache(max_sessions=2)
    first = c.new_context(101, NO_SESSION_ID, INITIAL_EPOCH, {A: state(0)}, []).session_id
    second = c.new_context(102, NO_SESSION_ID, INITIAL_EPOCH, {A: state(0)}, []).session_id
    assert c.new_context(101, first, 1, {}, []).error == ErrorCode.NONE  # first is now the most recent
    c.new_context(103, NO_SESSION_ID, INITIAL_EPOCH, {A: state(0)}, [])
    assert len(c) == 2
    assert c.new_context(102, second, 1, {}, []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert c.new_context(101, first, 2, {}, []).error == ErrorCode.NONE
    c.invariants()


def test_must_answer_only_what_changed_since_last_sent() -> None:
    """An incremental answer leaves out a partition whose HW and log start are what was last sent and
    that has no records, error or diverging epoch."""
    c = cache()
    session = c.new_context(FOLLOWER, NO_SESSION_ID, INITIAL_EPOCH, {A: state(0)}, []).session_id
    assert c.must_answer(session, A, SentPartitionState(5, 0), has_news=False), "first answer"
    assert not c.must_answer(session, A, SentPartitionState(5, 0), has_news=False), "idle"
    assert c.must_answer(session, A, SentPartitionState(5, 0), has_news=True), "records"
    assert c.must_answer(session, A, SentPartitionState(6, 0), has_news=False), "HW moved"
    assert c.must_answer(NO_SESSION_ID, A, SentPartitionState(6, 0), has_news=False), "sessionless: all"


def test_handler_sends_full_then_only_changes_then_full_after_reset() -> None:
    h = FetchSessionHandler()
    first = h.build({A: state(0), B: state(0)})
    assert (first.session_id, first.session_epoch, set(first.partitions)) == (NO_SESSION_ID, 0, {A, B})
    assert h.handle_response(ErrorCode.NONE, 77)
    second = h.build({A: state(4), B: state(0)})
    assert (second.session_id, second.session_epoch, set(second.partitions), second.forgotten) == (
        77,
        1,
        {A},
        (),
    )
    assert h.handle_response(ErrorCode.NONE, 77)
    third = h.build({A: state(4)})
    assert (third.session_epoch, third.partitions, third.forgotten) == (2, {}, (B,))
    h.reset()  # the request failed
    fourth = h.build({A: state(4)})
    assert (fourth.session_id, fourth.session_epoch, set(fourth.partitions)) == (77, INITIAL_EPOCH, {A})


@pytest.mark.parametrize(
    "code", [ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH]
)
def test_handler_session_error_makes_the_next_request_full(code: ErrorCode) -> None:
    h = FetchSessionHandler()
    h.build({A: state(0)})
    h.handle_response(ErrorCode.NONE, 9)
    h.build({A: state(1)})
    assert not h.handle_response(code, NO_SESSION_ID)
    assert h.build({A: state(1)}).session_epoch == INITIAL_EPOCH


def test_handler_and_cache_agree_over_many_rounds() -> None:
    """Follower and leader in step: the leader's resolved partitions always equal what the follower
    wants, whatever subset changes each round."""
    rng = random.Random(3)
    c, h = cache(), FetchSessionHandler()
    offsets = {A: 0, B: 0, C: 0}
    session_id = NO_SESSION_ID
    for _ in range(200):
        for tp in offsets:
            offsets[tp] += rng.choice((0, 0, 1))
        wanted = {tp: state(o) for tp, o in offsets.items() if rng.random() < 0.9}
        request = h.build(wanted)
        context = c.new_context(FOLLOWER, request.session_id, request.session_epoch, request.partitions,
                                request.forgotten)  # fmt: skip
        assert context.error == ErrorCode.NONE and context.partitions == wanted
        assert h.handle_response(context.error, context.session_id)
        session_id = context.session_id
        if rng.random() < 0.05:
            h.reset()
        c.invariants()
    assert session_id != NO_SESSION_ID


def test_a_partition_answered_with_an_error_is_listed_again() -> None:
    """Regression: the leader answers a topic id it does not know yet (UNKNOWN_TOPIC_ID) outside the
    session. Unless the follower lists that partition again, its later incremental requests never name
    it, the leader never fetches it, and the follower falls out of the ISR for good."""
    c, h = cache(), FetchSessionHandler()
    request = h.build({A: state(0)})
    context = c.new_context(FOLLOWER, request.session_id, request.session_epoch, {}, ())  # A: unknown id
    assert h.handle_response(context.error, context.session_id)
    h.relist([A])
    again = h.build({A: state(0)})
    assert again.session_epoch == 1 and set(again.partitions) == {A}
    context = c.new_context(
        FOLLOWER, again.session_id, again.session_epoch, again.partitions, again.forgotten
    )
    assert context.partitions == {A: state(0)}


def test_a_partition_answered_with_an_error_and_then_dropped_is_forgotten() -> None:
    """Regression: after a leadership change the old leader answers a partition FENCED_LEADER_EPOCH;
    the follower relists it, then stops wanting it (its new leader is another broker). Unless the
    next request names it in ``forgotten``, the old leader's session keeps it and answers its error at
    once on every fetch: the follower and the leader spin (0.2-0.4 CPU-s per second each, measured
    after a preferred election)."""
    c, h = cache(), FetchSessionHandler()
    request = h.build({A: state(0), B: state(0)})
    context = c.new_context(FOLLOWER, request.session_id, request.session_epoch, request.partitions, ())
    assert h.handle_response(context.error, context.session_id)
    h.relist([A])  # answered with an error
    dropped = h.build({B: state(0)})  # A's leader moved
    assert dropped.forgotten == (A,) and set(dropped.partitions) == set()
    context = c.new_context(
        FOLLOWER, dropped.session_id, dropped.session_epoch, dropped.partitions, dropped.forgotten
    )
    assert context.partitions == {B: state(0)}
    assert h.handle_response(context.error, context.session_id)
    assert h.build({B: state(0)}).forgotten == ()


def test_a_forget_names_the_topic_id_the_partition_was_sent_with() -> None:
    """Issue 24 §1, the follower's side: a partition that leaves the session is forgotten under the topic
    id it was last sent with (Kafka's FetchSessionHandler), also after an error made it relisted —
    not under whatever the metadata says now (a deleted topic has no id there)."""
    h, c = FetchSessionHandler(), cache()
    a, b = PartitionFetchRequest(0, 1, 1, 1 << 20, "id-t"), PartitionFetchRequest(0, 1, 1, 1 << 20, "id-u")
    request = h.build({A: a, C: b})
    context = c.new_context(FOLLOWER, request.session_id, request.session_epoch, request.partitions, ())
    assert h.handle_response(context.error, context.session_id)
    h.relist([C])  # answered with an error
    dropped = h.build({})
    assert dropped.forgotten == (A, C) and dropped.forgotten_topic_ids == {A: "id-t", C: "id-u"}


def test_the_cache_forgets_by_topic_id_even_an_id_nobody_knows_any_more() -> None:
    """Issue 24 §1, the leader's side: ``forgotten_ids`` drop the session's partitions fetched with that
    (topic id, partition), whatever the names; another incarnation of the topic (a new id, same name) is
    not touched. The session then answers nothing more for them."""
    c = cache()
    old = PartitionFetchRequest(0, 1, 1, 1 << 20, "old-id")
    full = c.new_context(FOLLOWER, NO_SESSION_ID, INITIAL_EPOCH, {A: old, B: old, C: state(0)}, ())
    step = c.new_context(FOLLOWER, full.session_id, 1, {}, (), [("old-id", 0), ("old-id", 1)])
    assert step.partitions == {C: state(0)}
    new = PartitionFetchRequest(0, 1, 1, 1 << 20, "new-id")
    c.new_context(FOLLOWER, full.session_id, 2, {A: new}, ())
    kept = c.new_context(FOLLOWER, full.session_id, 3, {}, (), [("old-id", 0)])
    assert kept.partitions == {A: new, C: state(0)}, "a forget of the old id dropped the new incarnation"
    c.invariants()
