"""Listening ports for every pykraft process, and the one rule for choosing them.

Serving: no listener may share a port with a live process. gRPC servers enable SO_REUSEPORT by
default, so a second server on a busy port would bind it silently and take half the connections;
``SERVER_OPTIONS`` turns that off (``grpc.so_reuseport=0``) and ``add_grpc_listener`` checks the port
first, so a busy port gives ``ListenerError`` with ONE line naming the setting and its value::

    --listen 127.0.0.1:9092: address already in use (another process serves it)

The processes print that line (``pykraft <role>: error: ...``) and exit 2, with no traceback. The
metrics endpoint and any other listener (the Kafka listener) use ``check_bindable`` the same way.

Reporting: a process that binds port 0 learns its port from the kernel; it writes the ports it got to
its ready file (``proto.runtime.ready_file``) as soon as it serves, which is what a launcher waits for
(``wait_listening``); its output (the log) carries no handshake lines.

Choosing ports up front (only where port 0 cannot work, e.g. Raft voters, which must know each other's
addresses before any of them starts): ``pick_ports`` returns ports that are free now, chosen at random
*outside* the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``), so no outgoing
connection and no port-0 bind can ever take one; it never hands out the same port twice in one process.
Another launcher may still pick the same port between the check and the bind, so whoever starts a
process on a picked port must retry with fresh ports when it fails with ``address already in use``
(``ADDRESS_IN_USE`` is the text to look for in its output).
"""

from __future__ import annotations

import errno
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from proto.runtime import ready_file
from proto.runtime.serving import GRPC_OPTIONS

SERVER_OPTIONS: list[tuple[str, int]] = [*GRPC_OPTIONS, ("grpc.so_reuseport", 0)]
ADDRESS_IN_USE = "address already in use"
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
PICK_PORT_MIN = 10_000  # below: well-known and registered services (Kafka's 9092, ...)
PICK_PORT_MAX = 65_535
PICK_ATTEMPTS_MAX = 1_000
LOOPBACK = "127.0.0.1"

_handed_out: set[int] = set()  # ports pick_ports returned in this process
_random = random.Random()  # seeded from os.urandom: concurrent launchers pick different ports


class ListenerError(OSError):
    """A listener could not bind; the message is one line naming the setting and its value."""


class NoFreePortError(OSError):
    """``pick_ports`` found no free port outside the ephemeral range."""


class PortTakenError(OSError):
    """A process exited because another process serves one of its ports: start it on fresh ports."""


class NotListeningError(OSError):
    """A process exited (or stayed silent past its deadline) before its ready file said it listens."""


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``[V6]:PORT``) -> (host, port)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def listener_error(setting: str, address: str, exc: OSError) -> ListenerError:
    if exc.errno == errno.EADDRINUSE:
        return ListenerError(f"{setting} {address}: {ADDRESS_IN_USE} (another process serves it)")
    reason = exc.strerror or str(exc)
    return ListenerError(f"{setting} {address}: cannot listen there ({reason.lower()})")


def check_bindable(setting: str, address: str, value: str | None = None) -> None:
    """Bind (and release) every address ``address`` resolves to, the way the servers bind
    (SO_REUSEADDR, no SO_REUSEPORT): ``ListenerError`` when a live process serves the port. The
    message names ``setting`` and ``value`` (default: the address)."""
    shown = address if value is None else value
    host, port = split_address(address)
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenerError(f"{setting} {shown}: cannot resolve {host!r} ({exc.strerror})") from None
    failures = []
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(sockaddr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise listener_error(setting, shown, exc) from None
            failures.append(exc)  # e.g. ::1 of "localhost" on a host without IPv6: the server skips it
    if failures and len(failures) == len(infos):
        raise listener_error(setting, shown, failures[0])


def add_grpc_listener(server: grpc.aio.Server, setting: str, address: str) -> int:
    """Bind ``server`` (built with ``SERVER_OPTIONS``) to ``address``; the bound port (the kernel's
    choice for port 0). A busy or unusable address raises ``ListenerError``."""
    check_bindable(setting, address)
    try:
        port = server.add_insecure_port(address)
    except RuntimeError:  # grpc's own bind failed (it logs why): most likely a port taken since the check
        port = 0
    if port == 0:
        check_bindable(setting, address)  # names a port taken meanwhile
        raise ListenerError(f"{setting} {address}: cannot listen there (gRPC could not bind it)")
    return port


def wait_listening(data_dir: Path, output: Path, start: int, exit_code: Callable[[], int | None],
                   timeout_s: float, what: str, pid: int | None = None,
                   state: str = ready_file.LISTENING) -> ready_file.ReadyFile:
    """The ready file a process writes in ``data_dir`` once it reaches ``state`` (by default: it
    listens, and the file holds the ports it got); with ``pid``, only a file that process wrote.

    ``exit_code()`` is None while the process runs. A process that exits first raises
    ``PortTakenError`` when its output (``output`` from byte ``start``) says ``ADDRESS_IN_USE`` (the
    caller retries on fresh ports), else ``NotListeningError`` with the last lines of that output, as
    does silence past ``timeout_s``; ``what`` names the process."""
    deadline = time.monotonic() + timeout_s
    while True:
        code = exit_code()  # before reading: a file written just before the exit is still seen
        ready = ready_file.read(data_dir)
        if ready is not None and (pid is None or ready.pid == pid) and ready.reached(state):
            return ready
        if code is not None:
            text = _read_from(output, start)
            tail = " | ".join(text.strip().splitlines()[-3:])
            if ADDRESS_IN_USE in text:
                raise PortTakenError(f"{what} exited ({code}): {tail}")
            raise NotListeningError(f"{what} exited ({code}) before it was {state} (see {output}): {tail}")
        if time.monotonic() > deadline:
            raise NotListeningError(f"{what} was not {state} within {timeout_s:.0f} s (see {output})")
        time.sleep(0.02)


@dataclass(frozen=True, slots=True)
class Started:
    """A process just started: where its output goes (from byte ``start``) and how to poll it."""

    name: str
    data_dir: Path  # where it writes its ready file
    output: Path
    start: int
    exit_code: Callable[[], int | None]
    pid: int | None = None


def start_on_picked_ports(start: Callable[[], list[Started]], stop: Callable[[], None],
                          repick: Callable[[], None], timeout_s: float,
                          attempts: int) -> list[ready_file.ReadyFile]:
    """Start processes that must know each other's picked ports up front (Raft voters); wait until
    each listens; the ports they report. When one finds its port taken: ``stop()`` them all,
    ``repick()`` the ports and start again, up to ``attempts`` times (then ``PortTakenError``). Any
    other failure stops them all too before it propagates."""
    for attempt in range(1, attempts + 1):
        started = start()
        try:
            return [wait_listening(s.data_dir, s.output, s.start, s.exit_code, timeout_s, s.name, s.pid)
                    for s in started]
        except PortTakenError:
            stop()
            if attempt == attempts:
                raise
            repick()
        except BaseException:  # any other failure: nothing started here may outlive it
            stop()
            raise
    raise AssertionError("unreachable: attempts >= 1")


def _read_from(path: Path, start: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def ephemeral_port_range() -> tuple[int, int]:
    try:
        low, high = (int(v) for v in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return LINUX_DEFAULT_EPHEMERAL_RANGE
    return low, high


def candidate_ranges() -> list[range]:
    """The ports ``pick_ports`` chooses from: [PICK_PORT_MIN, 65535] minus the ephemeral range."""
    low, high = ephemeral_port_range()
    ranges = [range(PICK_PORT_MIN, min(low, PICK_PORT_MAX + 1)), range(max(high + 1, PICK_PORT_MIN),
                                                                        PICK_PORT_MAX + 1)]
    return [r for r in ranges if len(r) > 0]


def is_free(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def pick_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct ports, free now, outside the ephemeral range (see the module docstring)."""
    ranges = candidate_ranges()
    if not ranges:
        raise NoFreePortError(f"no ports outside the ephemeral range {ephemeral_port_range()} to pick from")
    weights = [len(r) for r in ranges]
    ports: list[int] = []
    for _ in range(PICK_ATTEMPTS_MAX):
        if len(ports) == count:
            return ports
        port = _random.choice(_random.choices(ranges, weights)[0])
        if port in _handed_out or not is_free(port, host):
            continue
        _handed_out.add(port)
        ports.append(port)
    if len(ports) == count:
        return ports
    raise NoFreePortError(f"found {len(ports)} of {count} free ports in {PICK_ATTEMPTS_MAX} tries "
                          f"outside the ephemeral range {ephemeral_port_range()}")


def pick_port(host: str = LOOPBACK) -> int:
    return pick_ports(1, host)[0]

