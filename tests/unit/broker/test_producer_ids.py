"""broker.txn.producer_ids: ids come from controller-allocated blocks, one by one, a new block when used
up."""

from __future__ import annotations

import asyncio

import pytest

from broker.txn.producer_ids import FIRST_PRODUCER_EPOCH, ProducerIdManager, ProducerIdUnavailableError
from proto.errors import ErrorCode


def test_ids_are_handed_out_from_blocks_in_order():
    """Each block [start, start+len) is used up before the next one is requested; epoch starts at 0."""
    blocks = [(ErrorCode.NONE, 1000, 2), (ErrorCode.NONE, 5000, 2)]
    calls = []

    async def allocate():
        calls.append(1)
        return blocks[len(calls) - 1]

    async def run():
        manager = ProducerIdManager(allocate)
        return [await manager.generate() for _ in range(3)]

    ids = asyncio.run(run())
    assert ids == [(1000, FIRST_PRODUCER_EPOCH), (1001, FIRST_PRODUCER_EPOCH), (5000, FIRST_PRODUCER_EPOCH)]
    assert len(calls) == 2


@pytest.mark.parametrize(
    "answer",
    [(ErrorCode.NOT_CONTROLLER, 0, 0), (ErrorCode.NONE, 0, 0)],
    ids=["controller-error", "empty-block"],
)
def test_no_block_is_a_retriable_error(answer):
    """A controller error or an empty block -> COORDINATOR_NOT_AVAILABLE (the client retries)."""

    async def allocate():
        return answer

    with pytest.raises(ProducerIdUnavailableError) as info:
        asyncio.run(ProducerIdManager(allocate).generate())
    assert info.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
