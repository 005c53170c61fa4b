"""proto.runtime.listeners: the one rule for choosing ports and the one-line refusal of a busy port."""

from __future__ import annotations

import socket

import pytest

from proto.runtime import listeners, ready_file
from proto.runtime.listeners import ADDRESS_IN_USE, ListenerError, check_bindable, pick_ports


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


def ready(port: int, pid: int = 7, state: str = ready_file.LISTENING) -> ready_file.ReadyFile:
    return ready_file.ReadyFile(1, "controller", pid, state, f"127.0.0.1:{port}")


class FakeProcess:
    """A process as ``wait_listening`` sees it: maybe a ready file, output lines, then maybe an exit."""

    def __init__(self, data_dir, output, lines: list[str], code: int | None,
                 wrote: ready_file.ReadyFile | None = None) -> None:
        data_dir.mkdir(exist_ok=True)
        output.write_text("".join(line + "\n" for line in lines))
        if wrote is not None:
            ready_file.write(data_dir, wrote)
        self.code = code

    def poll(self) -> int | None:
        return self.code


@pytest.mark.parametrize(
    ("lines", "code", "wrote", "outcome"),
    [
        ([], None, ready(5), 5),
        ([], None, ready(5, state=ready_file.READY), 5),
        ([], None, ready(5, pid=6), listeners.NotListeningError),
        (["pykraft controller: error: --listen 127.0.0.1:9: address already in use (another ...)"], 2,
         None, listeners.PortTakenError),
        (["pykraft broker: error: --data-dir x: not a directory"], 2, None, listeners.NotListeningError),
        (["still importing"], None, None, listeners.NotListeningError),
    ],
    ids=["listening", "ready-is-past-listening", "an-earlier-runs-file", "port-taken", "other-exit",
         "silent-past-deadline"],
)  # fmt: skip
def test_wait_listening(tmp_path, lines: list[str], code: int | None, wrote, outcome) -> None:
    """The launcher's handshake is the ready file of the pid it started, never a line of the log."""
    out, data = tmp_path / "out", tmp_path / "data"
    proc = FakeProcess(data, out, ["an earlier run's output: address already in use", *lines], code, wrote)
    start = len("an earlier run's output: address already in use\n")
    if isinstance(outcome, int):
        assert listeners.wait_listening(data, out, start, proc.poll, 0.1, "node", pid=7).port == outcome
    else:
        with pytest.raises(outcome, match="node"):
            listeners.wait_listening(data, out, start, proc.poll, 0.1, "node", pid=7)


def test_wait_listening_names_the_last_lines_of_a_process_that_exited(tmp_path) -> None:
    proc = FakeProcess(tmp_path / "d", tmp_path / "out", ["one", "two", "three", "four"], 1)
    with pytest.raises(listeners.NotListeningError, match=r"node exited \(1\).*two \| three \| four$"):
        listeners.wait_listening(tmp_path / "d", tmp_path / "out", 0, proc.poll, 5.0, "node")


def test_start_on_picked_ports_starts_over_when_a_port_was_taken(tmp_path) -> None:
    events: list[str] = []
    runs = iter([(["pykraft controller: error: --listen h:1: address already in use (x)"], 2, None),
                 ([], None, ready(7))])  # fmt: skip

    def start() -> list[listeners.Started]:
        events.append("start")
        lines, code, wrote = next(runs)
        data, out = tmp_path / f"data{len(events)}", tmp_path / f"out{len(events)}"
        proc = FakeProcess(data, out, lines, code, wrote)
        return [listeners.Started("node", data, out, 0, proc.poll)]

    started = listeners.start_on_picked_ports(
        start, lambda: events.append("stop"), lambda: events.append("repick"), 1.0, attempts=3
    )
    assert [r.port for r in started] == [7]
    assert events == ["start", "stop", "repick", "start"]
