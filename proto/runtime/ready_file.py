"""A node's ready file: how a controller or broker tells whoever started it where it serves.

A process does not announce itself in its log stream (that is for people and log tools, in logfmt):
it writes ``<data-dir>/ready.json`` instead, atomically (a temporary file in the same directory, then
``rename``), so a reader sees a whole file or none::

    {"node_id": 101, "role": "broker", "pid": 4242, "state": "ready",
     "listener": "127.0.0.1:40111",
     "kafka_listeners": {"PLAINTEXT": "127.0.0.1:40112"},
     "metrics": "http://127.0.0.1:40113/metrics"}

- ``state``: ``listening`` once every listener is bound (the ports are final: a launcher that asked
  for port 0 learns them here), then ``ready`` (a controller at once, since it serves once it listens;
  a broker once it is registered with the active controller).
- ``listener``: the gRPC listen address with the bound port. ``kafka_listeners``: each Kafka listener's
  name and the advertised ``HOST:PORT`` that clients dial. ``metrics``: the Prometheus endpoint's URL,
  or null when it is off.
- ``pid``: the writer. A file left by an earlier run (a crash leaves it behind) names another pid, so
  a reader waiting for the process it started compares ``pid``; a launcher also deletes the file
  before it starts a node.

Thread-safety: ``write`` is called from one process's event loop; readers are other processes.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

READY_FILE = "ready.json"
LISTENING = "listening"
READY = "ready"
STATES = (LISTENING, READY)  # in the order a process goes through them


@dataclass(frozen=True, slots=True)
class ReadyFile:
    node_id: int
    role: str  # "controller", "broker", or "raft" (python -m raft.server, a bare Raft node)
    pid: int
    state: str  # one of STATES
    listener: str  # the gRPC listen HOST:PORT, bound
    kafka_listeners: dict[str, str] = field(default_factory=dict)  # name -> advertised HOST:PORT
    metrics: str | None = None  # http://HOST:PORT/metrics, None when off

    @property
    def port(self) -> int:
        return _port(self.listener)

    @property
    def metrics_port(self) -> int | None:
        if self.metrics is None:
            return None
        return _port(self.metrics.split("//", 1)[-1].split("/", 1)[0])

    def kafka_port(self, name: str = "PLAINTEXT") -> int:
        """The advertised port of Kafka listener ``name``; 0 when there is none."""
        address = self.kafka_listeners.get(name)
        return _port(address) if address else 0

    def reached(self, state: str) -> bool:
        """True once the process is at ``state`` or past it."""
        return STATES.index(self.state) >= STATES.index(state)


def path_in(data_dir: Path) -> Path:
    return Path(data_dir) / READY_FILE


def write(data_dir: Path, ready: ReadyFile) -> None:
    """Replace the ready file at once: readers never see a partial one."""
    assert ready.state in STATES, f"unknown state {ready.state!r}; states are {STATES}"
    target = path_in(data_dir)
    tmp = target.with_name(f"{READY_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(ready), sort_keys=True) + "\n")
    tmp.replace(target)


def read(data_dir: Path) -> ReadyFile | None:
    """The ready file of ``data_dir``; None when there is none or it cannot be read as one (a file of
    another format is not ours to trust: the caller keeps waiting, bounded by its deadline)."""
    try:
        fields = json.loads(path_in(data_dir).read_text())
        ready = ReadyFile(**fields)
    except (OSError, ValueError, TypeError):
        return None
    return ready if ready.state in STATES else None


def remove(data_dir: Path) -> None:
    path_in(data_dir).unlink(missing_ok=True)


def _port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])
