"""proto.listeners: the one rule for choosing ports and the one-line refusal of a busy port."""

from __future__ import annotations

import socket

import pytest

from proto import listeners
from proto.listeners import ADDRESS_IN_USE, ListenerError, check_bindable, parse_listening, pick_ports


def test_picked_ports_are_distinct_free_and_outside_the_ephemeral_range() -> None:
    """Ports chosen up front avoid the ephemeral range: no outgoing connection or port-0 bind takes them."""
    low, high = listeners.ephemeral_port_range()
    ports = pick_ports(50)
    assert len(set(ports)) == 50
    assert all(listeners.PICK_PORT_MIN <= p <= 65535 and not low <= p <= high for p in ports), ports
    assert all(listeners.is_free(p) for p in ports)
    assert not set(ports) & set(pick_ports(50)), "a port was handed out twice in one process"


def test_ephemeral_range_is_read_from_the_kernel(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "ip_local_port_range"
    fake.write_text("20000\t64000\n")
    monkeypatch.setattr(listeners, "EPHEMERAL_RANGE_FILE", fake)
    assert listeners.ephemeral_port_range() == (20000, 64000)
    assert [(r.start, r.stop) for r in listeners.candidate_ranges()] == [(10000, 20000), (64001, 65536)]
    assert all(not 20000 <= p <= 64000 for p in pick_ports(20))
    fake.write_text("garbage")
    assert listeners.ephemeral_port_range() == listeners.LINUX_DEFAULT_EPHEMERAL_RANGE


def test_no_candidates_is_a_named_error(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "ip_local_port_range"
    fake.write_text("1024 65535")
    monkeypatch.setattr(listeners, "EPHEMERAL_RANGE_FILE", fake)
    with pytest.raises(listeners.NoFreePortError, match="outside the ephemeral range"):
        pick_ports(1)


def test_a_busy_port_is_one_line_naming_the_setting() -> None:
    with socket.socket() as live:
        live.bind(("127.0.0.1", 0))
        live.listen()
        port = live.getsockname()[1]
        with pytest.raises(ListenerError) as caught:
            check_bindable("--listen", f"127.0.0.1:{port}")
        assert str(caught.value) == f"--listen 127.0.0.1:{port}: {ADDRESS_IN_USE} (another process serves it)"
        with pytest.raises(ListenerError, match=f"^--metrics-port {port}: {ADDRESS_IN_USE}"):
            check_bindable("--metrics-port", f"127.0.0.1:{port}", str(port))
    check_bindable("--listen", f"127.0.0.1:{port}")  # free again once the live one closed


def test_an_address_that_is_not_ours_is_named() -> None:
    with pytest.raises(ListenerError, match=r"^--listen 192\.0\.2\.1:\d+: cannot listen there"):
        check_bindable("--listen", f"192.0.2.1:{pick_ports(1)[0]}")


@pytest.mark.parametrize(
    ("line", "port"),
    [("LISTENING 127.0.0.1:4321\n", 4321), ("LISTENING [::1]:99", 99), ("READY 101", None), ("", None)],
    ids=["ipv4", "ipv6", "other-line", "empty"],
)
def test_parse_listening(line: str, port: int | None) -> None:
    assert parse_listening(line) == port


class FakeProcess:
    """A process as ``wait_listening`` sees it: output lines written to a file, then maybe an exit."""

    def __init__(self, path, lines: list[str], code: int | None) -> None:
        path.write_text("".join(line + "\n" for line in lines))
        self.code = code

    def poll(self) -> int | None:
        return self.code


@pytest.mark.parametrize(
    ("lines", "code", "outcome"),
    [
        (["old run", "LISTENING 127.0.0.1:5"], None, 5),
        (["pykraft controller: error: --listen 127.0.0.1:9: address already in use (another ...)"], 2,
         listeners.PortTakenError),
        (["pykraft broker: error: --data-dir x: not a directory"], 2, listeners.NotListeningError),
        (["still importing"], None, listeners.NotListeningError),
    ],
    ids=["listening", "port-taken", "other-exit", "silent-past-deadline"],
)
def test_wait_listening(tmp_path, lines: list[str], code: int | None, outcome) -> None:
    out = tmp_path / "out"
    proc = FakeProcess(out, ["LISTENING 127.0.0.1:1", *lines], code)
    start = len("LISTENING 127.0.0.1:1\n")  # an earlier run's line is not this run's
    if isinstance(outcome, int):
        assert listeners.wait_listening(out, start, proc.poll, 0.1, "node") == outcome
    else:
        with pytest.raises(outcome, match="node"):
            listeners.wait_listening(out, start, proc.poll, 0.1, "node")


def test_start_on_picked_ports_starts_over_when_a_port_was_taken(tmp_path) -> None:
    events: list[str] = []
    outputs = iter([["pykraft controller: error: --listen h:1: address already in use (x)"],
                    ["LISTENING 127.0.0.1:7"]])  # fmt: skip

    def start() -> list[listeners.Started]:
        events.append("start")
        proc = FakeProcess(tmp_path / f"out{len(events)}", next(outputs), None)
        proc.code = 2 if "error" in (tmp_path / f"out{len(events)}").read_text() else None
        return [listeners.Started("node", tmp_path / f"out{len(events)}", 0, proc.poll)]

    ports = listeners.start_on_picked_ports(
        start, lambda: events.append("stop"), lambda: events.append("repick"), 1.0, attempts=3
    )
    assert ports == [7]
    assert events == ["start", "stop", "repick", "start"]
