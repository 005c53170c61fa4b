"""proto.logfmt: one ``key=value`` line per log record, with node id, role and the event's fields;
exceptions stay on the line (``error=``; a traceback only at ERROR and above, escaped)."""

from __future__ import annotations

import logging
import shlex

import pytest

from proto.logfmt import LogfmtFormatter, log_event, quote


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
