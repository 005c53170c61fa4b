"""``pykraft cluster up``'s Ctrl-C while it waits for the cluster (``cli_cluster.CtrlC``): a Ctrl-C
whose KeyboardInterrupt something swallowed (a finalizer or a callback run from C prints "Exception
ignored" and carries on) still ends the wait at its next poll; the SIGINT handler is restored after."""

from __future__ import annotations

import contextlib
import signal

import pytest

from pykraft import cli_cluster


class PollingCluster:
    """Enough of a LocalCluster for ``wait_ready``: ``wait_until`` polls its condition a few times."""

    broker_nodes: list = []
    nodes: list = []

    def __init__(self) -> None:
        self.polls = 0

    def wait_until(self, condition, *args) -> None:
        for _ in range(3):
            self.polls += 1
            if condition():
                return
        raise AssertionError("the wait went on after the Ctrl-C")


def test_a_ctrl_c_whose_keyboard_interrupt_was_lost_still_ends_the_wait() -> None:
    before = signal.getsignal(signal.SIGINT)
    cluster = PollingCluster()
    with cli_cluster.CtrlC() as ctrl_c:
        ctrl_c.check()  # not pressed: nothing to raise
        with contextlib.suppress(KeyboardInterrupt):  # lost, as in a finalizer
            signal.raise_signal(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):
            cli_cluster.wait_ready(cluster, 1.0, progress=None, ctrl_c=ctrl_c)  # type: ignore[arg-type]
    assert cluster.polls == 1, "raised at the first poll, before asking the quorum"
    assert signal.getsignal(signal.SIGINT) is before
