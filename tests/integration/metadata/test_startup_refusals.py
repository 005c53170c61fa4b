"""Issue 17 §1: a process given a setting it cannot use refuses to start with one line naming the
setting and the value (exit status 2, no traceback, within a deadline), instead of an errno from deep
inside the start-up or a ready file that serves nobody.

- ``--data-dir`` that is a file (controller and broker).
- A controller whose ``--listen`` is another voter's ``--voters`` entry (a copied command with the wrong
  ``--node-id``), or a local address that is not its own entry (the other voters dial the entry, so it
  would sit at term 0); ``--advertised-listener`` equal to the entry (a proxy forwards it) is accepted.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from proto.runtime import ready_file
from proto.runtime.listeners import pick_ports, wait_listening

pytestmark = pytest.mark.integration
REFUSED_WITHIN_S = 15.0  # python start-up under load; nothing else waits


def run(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pykraft.cli", *args], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    return done, time.monotonic() - started


def assert_refused(done: subprocess.CompletedProcess[str], took_s: float, role: str, line: str,
                   data_dir: Path) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [f"pykraft {role}: error: {line}"]
    assert ready_file.read(data_dir) is None  # it never said it serves
    assert took_s < REFUSED_WITHIN_S


@pytest.mark.parametrize("role", ["controller", "broker"])
def test_a_data_dir_that_is_a_file_is_refused_naming_it(tmp_path: Path, role: str) -> None:
    a_file = tmp_path / "data"
    a_file.write_text("not a directory")
    port, other = pick_ports(2)
    if role == "controller":
        args = ["--node-id", "1", "--voters", f"1@127.0.0.1:{port}"]
    else:
        args = ["--node-id", "101", "--controllers", f"127.0.0.1:{other}"]
    done, took_s = run(role, *args, "--listen", f"127.0.0.1:{port}", "--data-dir", str(a_file),
                       "--metrics-port", "-1")  # fmt: skip
    assert_refused(done, took_s, role,
                   f"--data-dir {a_file}: is a file, not a directory; give a directory (created if missing)",
                   a_file)


def test_a_controller_listening_on_another_voters_entry_is_refused(tmp_path: Path) -> None:
    ports = pick_ports(3)
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(ports, start=1))
    done, took_s = run("controller", "--node-id", "1", "--listen", f"127.0.0.1:{ports[1]}",
                       "--voters", voters, "--data-dir", str(tmp_path / "c"),
                       "--metrics-port", "-1")  # fmt: skip
    assert_refused(done, took_s, "controller",
                   f"--listen 127.0.0.1:{ports[1]} is controller 2's --voters entry, but this is --node-id 1 "
                   f"(whose entry is 127.0.0.1:{ports[0]}): give the node id of this address",
                   tmp_path / "c")  # fmt: skip


def test_a_controller_listening_where_its_voters_entry_does_not_point_is_refused(tmp_path: Path) -> None:
    *entries, elsewhere = pick_ports(4)
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(entries, start=1))
    done, took_s = run("controller", "--node-id", "2", "--listen", f"127.0.0.1:{elsewhere}",
                       "--voters", voters, "--data-dir", str(tmp_path / "c"),
                       "--metrics-port", "-1")  # fmt: skip
    assert_refused(done, took_s, "controller",
                   f"--listen 127.0.0.1:{elsewhere} does not match controller 2's --voters entry "
                   f"127.0.0.1:{entries[1]}, the address every other voter dials: give the node id whose "
                   f"entry this is, listen on 127.0.0.1:{entries[1]}, or set --advertised-listener to the "
                   "entry when a proxy forwards it here", tmp_path / "c")  # fmt: skip


def test_a_controller_behind_a_proxy_that_says_so_starts(tmp_path: Path) -> None:
    *entries, listen = pick_ports(4)
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in enumerate(entries, start=1))
    output = tmp_path / "controller.out"
    with open(output, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "pykraft.cli", "controller", "--node-id", "2",
             "--listen", f"127.0.0.1:{listen}", "--advertised-listener", f"127.0.0.1:{entries[1]}",
             "--voters", voters,
             "--data-dir", str(tmp_path / "c"), "--metrics-port", "-1"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        ready = wait_listening(tmp_path / "c", output, 0, process.poll, 60, "controller 2", process.pid,
                               ready_file.READY)  # fmt: skip
        assert (ready.node_id, ready.listener) == (2, f"127.0.0.1:{listen}")
    finally:
        process.kill()
        process.wait()
