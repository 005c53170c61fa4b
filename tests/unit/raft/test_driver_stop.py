"""raft.driver stops when cancelled, even when the cancel lands in the same loop iteration as a wake-up.

The cause of a controller that ignored SIGTERM until SIGKILL: on Python 3.11 ``asyncio.wait_for``
returns normally — swallowing the cancellation — when the outer task is cancelled just after its inner
future completed (CPython gh-86296, fixed in 3.12). The driver's loop waited for work with
``wait_for(wakeup.wait(), ...)``; a message arriving as ``stop()`` cancelled it kept the loop running
forever. Each case below places the cancel a different number of loop iterations after the wake-up,
so one of them hits that window.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import pytest
from test_transport_driver import ListMachine, config, wait_leader

from raft.driver import RaftDriver

YIELDS = range(6)  # loop iterations between the wake-up and the cancel
STOP_BOUND_S = 2.0


async def cancel_after_wakeup(
    task: asyncio.Task, wakeup: asyncio.Event, yields: int, bound_s: float = STOP_BOUND_S
) -> bool:
    """Set ``wakeup``, let ``yields`` loop iterations pass, cancel ``task``: True if it then ended."""
    wakeup.set()
    for _ in range(yields):
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait({task}, timeout=bound_s)
    return task.done()


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps cancellations since 3.12")
def test_wait_for_swallows_a_cancel_that_races_its_future() -> None:
    """The Python 3.11 behaviour that made the old loop immortal (the reason the driver avoids it)."""

    async def old_loop(wakeup: asyncio.Event) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), 0.05)
            wakeup.clear()

    async def scenario() -> list[bool]:
        ended = []
        for yields in YIELDS:
            wakeup = asyncio.Event()
            task = asyncio.create_task(old_loop(wakeup))
            await asyncio.sleep(0)
            ended.append(await cancel_after_wakeup(task, wakeup, yields, bound_s=0.3))
            while not task.done():  # clean up: cancel until it takes
                task.cancel()
                await asyncio.wait({task}, timeout=0.1)
        return ended

    assert not all(asyncio.run(scenario())), "wait_for kept every cancellation: the race did not show"


@pytest.mark.parametrize("yields", YIELDS)
def test_driver_loop_ends_on_one_cancel_racing_a_wakeup(tmp_path: Path, yields: int) -> None:
    async def scenario() -> bool:
        driver = RaftDriver(config(tmp_path), ListMachine())
        await driver.start()
        try:
            await wait_leader(driver)
            task = driver._task
            assert task is not None
            ended = await cancel_after_wakeup(task, driver._wakeup, yields)
        finally:
            await asyncio.wait_for(driver.stop(), STOP_BOUND_S)
        return ended

    assert asyncio.run(scenario()), f"the driver loop survived a cancel {yields} iterations after a wake-up"


def test_stop_ends_a_busy_driver(tmp_path: Path) -> None:
    """``stop()`` returns promptly while proposals keep waking the loop."""

    async def scenario() -> None:
        driver = RaftDriver(config(tmp_path), ListMachine())
        await driver.start()
        await wait_leader(driver)

        async def propose_forever() -> None:
            with contextlib.suppress(Exception):
                while True:
                    await driver.propose(b"x")

        proposers = [asyncio.create_task(propose_forever()) for _ in range(4)]
        await asyncio.sleep(0.2)
        await asyncio.wait_for(driver.stop(), STOP_BOUND_S)
        await asyncio.wait(proposers, timeout=STOP_BOUND_S)
        assert all(p.done() for p in proposers), "proposals still pending after stop()"

    asyncio.run(scenario())
