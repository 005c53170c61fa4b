"""pykraft.cluster / cli_cluster without processes: node lookup, the lock, waits with progress and
deadlines, and the step timings ``cluster up`` prints."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pykraft import cli_cluster
from pykraft.cluster import ClusterError, LocalCluster, NodeSpec, cluster_lock

HOLD_THE_LOCK = """
import sys, time
from pathlib import Path
from pykraft.cluster import cluster_lock
with cluster_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def cluster_of(tmp_path) -> LocalCluster:
    cluster = LocalCluster(tmp_path, controllers=3, brokers=2)
    cluster.nodes = [NodeSpec("controller", i, 20000 + i) for i in (1, 2, 3)]
    cluster.nodes += [NodeSpec("broker", i, 0) for i in (101, 102)]
    return cluster


@pytest.mark.parametrize(
    ("ref", "name"),
    [("101", "broker-101"), ("2", "controller-2"), ("broker-102", "broker-102")],
    ids=["broker-id", "controller-id", "name"],
)
def test_find_node_by_id_or_name(tmp_path, ref: str, name: str) -> None:
    assert cluster_of(tmp_path).find_node(ref).name == name


@pytest.mark.parametrize("ref", ["7", "broker-7", "", "controller"], ids=["id", "name", "empty", "role"])
def test_an_unknown_node_names_the_nodes_there_are(tmp_path, ref: str) -> None:
    known = "its nodes are 1 (controller), 2 (controller), 3 (controller), 101 (broker), 102 (broker)"
    with pytest.raises(ClusterError, match=re.escape(known)):
        cluster_of(tmp_path).find_node(ref)


def test_a_second_command_on_the_cluster_is_refused_naming_the_first(tmp_path) -> None:
    """The lock is an flock: another process's holds it while that process lives."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        refused = rf"another `pykraft cluster` command .* \(pid {holder.pid}"
        with pytest.raises(ClusterError, match=refused), cluster_lock(tmp_path):
            pass
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    with cluster_lock(tmp_path):  # free again once the holder is gone
        pass


def test_no_lock_file_where_there_is_no_directory(tmp_path) -> None:
    with cluster_lock(tmp_path / "none"):
        pass
    assert not (tmp_path / "none").exists()


def test_wait_until_reports_progress_then_times_out_saying_what_is_missing(tmp_path) -> None:
    notes: list[str] = []
    with pytest.raises(ClusterError, match=r"timed out after 0 s waiting for brokers unfenced \(missing b\)"):
        cluster_of(tmp_path).wait_until(lambda: False, 0.35, "brokers unfenced", notes.append,
                                        lambda: "missing b", progress_every_s=0.1)  # fmt: skip
    expected = r"waiting for brokers unfenced, \d+ s: missing b"
    assert notes and all(re.fullmatch(expected, n) for n in notes), notes


def test_wait_until_returns_once_the_condition_holds(tmp_path) -> None:
    answers = itertools.chain([False, False], itertools.repeat(True))
    cluster_of(tmp_path).wait_until(lambda: next(answers), 5.0, "x")
    assert next(answers) is True


def test_steps_print_each_duration_and_the_total(capsys, monkeypatch) -> None:
    clock = iter([100.0, 101.5, 104.0])
    monkeypatch.setattr(cli_cluster.time, "monotonic", lambda: next(clock))
    steps = cli_cluster.Steps()
    steps.step("controllers listening")
    steps.step("quorum leader elected (2)")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split() for line in lines] == [
        ["controllers", "listening", "1.5", "s", "(at", "1.5", "s)"],
        ["quorum", "leader", "elected", "(2)", "2.5", "s", "(at", "4.0", "s)"],
    ]


def test_a_process_of_another_cluster_whose_path_ends_alike_is_not_the_node(tmp_path) -> None:
    """The pid check matches whole arguments: a process given /elsewhere/<this node's directory> (a path
    this node's directory is a suffix of) does not run this node, so status, stop and down never signal
    it. Only /proc/PID/cmdline is read: the other directory need not exist."""
    mine = LocalCluster(tmp_path / "data", controllers=0, brokers=1)
    mine.nodes = [NodeSpec("broker", 101, 0)]
    other = f"/elsewhere{mine.node_dir(mine.nodes[0])}"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--data-dir", other])
    try:
        deadline = time.monotonic() + 10
        while other.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():  # exec'd yet?
            assert time.monotonic() < deadline, "the process never showed its command line"
            time.sleep(0.01)
        theirs = LocalCluster(Path(f"/elsewhere{tmp_path / 'data'}"), controllers=0, brokers=1)
        theirs.nodes = [NodeSpec("broker", 101, 0)]
        assert not mine._is_node_process(mine.nodes[0], proc.pid)
        assert theirs._is_node_process(theirs.nodes[0], proc.pid)
    finally:
        proc.kill()
        proc.wait(timeout=10)
