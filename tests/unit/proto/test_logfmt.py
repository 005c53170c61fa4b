"""proto.runtime.logfmt: one ``key=value`` line per log record, with node id, role and the event's fields;
exceptions stay on the line (``error=``; a traceback only at ERROR and above, escaped)."""

from __future__ import annotations

import logging
import shlex

import pytest

from proto.runtime.logfmt import LogfmtFormatter, RateLimiter, log_event, quote


def render(level: int, msg: str, fields: dict | None = None, exc: BaseException | None = None) -> str:
    logger = logging.getLogger("broker.server")
    record = logger.makeRecord(
        "broker.server", level, __file__, 1, msg, (), (type(exc), exc, exc.__traceback__) if exc else None,
        extra=None if fields is None else {"logfmt_fields": fields},
    )  # fmt: skip
    return LogfmtFormatter(101, "broker").format(record)


def parse(line: str) -> dict[str, str]:
    """logfmt back into fields (the quoting is shell-compatible for these values)."""
    return dict(item.split("=", 1) for item in shlex.split(line))


def test_event_line_has_node_role_and_fields() -> None:
    line = render(logging.INFO, "become_leader", {"topic": "t", "partition": 0, "leader_epoch": 3})
    fields = parse(line)
    assert "\n" not in line
    assert fields["level"] == "INFO" and fields["node"] == "101" and fields["role"] == "broker"
    assert (fields["event"], fields["topic"], fields["partition"], fields["leader_epoch"]) == (
        "become_leader", "t", "0", "3",
    )  # fmt: skip
    assert fields["ts"].endswith("Z")


def test_plain_message_and_list_fields() -> None:
    assert parse(render(logging.WARNING, "heartbeat refused (STALE)"))["msg"] == "heartbeat refused (STALE)"
    assert parse(render(logging.INFO, "isr_changed", {"isr": [101, 102]}))["isr"] == "[101,102]"


@pytest.mark.parametrize(
    ("level", "has_traceback"),
    [(logging.INFO, False), (logging.WARNING, False), (logging.ERROR, True), (logging.CRITICAL, True)],
    ids=["info", "warning", "error", "critical"],
)
def test_exceptions_stay_on_one_line(level: int, has_traceback: bool) -> None:
    """Expected errors (below ERROR) log their message only; bugs keep the traceback, escaped."""
    try:
        raise OSError("disk full")
    except OSError as exc:
        line = render(level, "flush_failed", {}, exc)
    assert "\n" not in line
    fields = parse(line)
    assert fields["error"] == "OSError: disk full"
    assert ("traceback" in fields) == has_traceback


@pytest.mark.parametrize(
    ("value", "quoted"),
    [("plain", "plain"), ("two words", '"two words"'), ('say "hi"', '"say \\"hi\\""'), ("a=b", '"a=b"'),
     ("", '""'), ("x\ny", '"x\\ny"')],
    ids=["plain", "space", "quotes", "equals", "empty", "newline"],
)  # fmt: skip
def test_quoting(value: str, quoted: str) -> None:
    assert quote(value) == quoted


def test_fields_named_like_fixed_keys_are_renamed(caplog: pytest.LogCaptureFixture) -> None:
    """A caller's ``error=`` or ``node=`` must neither crash the process nor shadow the fixed key."""
    with caplog.at_level(logging.INFO, logger="x"):
        log_event(logging.getLogger("x"), logging.INFO, "register_retry", error="no controller", node=7)
    fields = parse(LogfmtFormatter(101, "broker").format(caplog.records[-1]))
    assert (fields["node"], fields["node_"], fields["error_"]) == ("101", "7", "no controller")


# RateLimiter: per key, the first occurrence of each window is printed, the rest counted and said once.
# Each step: (key, now_ms) -> what admit returns (None = suppressed; a number = print, after saying
# that many suppressed from the key's ended window).
@pytest.mark.parametrize(
    "steps",
    [
        [("a", 0, 0), ("a", 1, None), ("a", 999, None), ("a", 1000, 2), ("a", 1001, None)],
        [("a", 0, 0), ("b", 10, 0), ("a", 20, None), ("b", 30, None)],
        [("a", 0, 0), ("a", 5000, 0), ("a", 5999, None)],
    ],
    ids=["window-then-count", "keys-are-independent", "nothing-suppressed-nothing-said"],
)
def test_rate_limiter_admits_the_first_of_each_window(steps: list[tuple[str, int, int | None]]) -> None:
    limiter = RateLimiter(interval_ms=1000)
    assert [limiter.admit(key, now) for key, now, _ in steps] == [want for _, _, want in steps]


def test_rate_limiter_expired_says_each_count_once_and_forgets_ended_windows() -> None:
    limiter = RateLimiter(interval_ms=1000)
    for key, now in [("a", 0), ("a", 1), ("a", 2), ("b", 500), ("c", 600), ("c", 700)]:
        limiter.admit(key, now)
    assert limiter.expired(999) == []
    assert limiter.expired(1000) == [("a", 2)]  # only the ended window, only with a count
    assert limiter.expired(1600) == [("c", 1)]  # b ended with nothing suppressed: no line
    assert len(limiter) == 0 and limiter.expired(5000) == []
    assert limiter.admit("a", 5000) == 0  # the count was said by expired, not again here


def test_rate_limiter_keeps_at_most_max_keys_and_counts_the_rest_together() -> None:
    limiter = RateLimiter(interval_ms=1000, max_keys=2)
    assert [limiter.admit(k, 0) for k in ("a", "b", "c", "d", "e")] == [0, 0, 0, None, None]
    assert len(limiter) == 3  # a, b and the overflow window
    assert sorted(limiter.expired(1000)) == [(RateLimiter.OVERFLOW_KEY, 2)]


def test_rate_limiter_refuses_a_zero_interval() -> None:
    with pytest.raises(AssertionError):
        RateLimiter(interval_ms=0)
