"""Producer ids for InitProducerId: blocks from the controller, handed out one by one (Kafka's
RPCProducerIdManager).

The active controller owns the id space and allocates it in blocks through the Raft log
(``ControllerService.AllocateProducerIds``: ``[producer_id_start, producer_id_start + len)``), so ids
are unique across brokers and restarts. The broker keeps the current block and asks for the next one
when it is used up; concurrent InitProducerId calls share one outstanding request. A new id starts
at producer epoch 0 (there are no transactional ids, so nothing is ever re-initialised with a bumped
epoch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from proto.errors import ErrorCode

FIRST_PRODUCER_EPOCH = 0


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    start: int
    length: int

    @property
    def end(self) -> int:
        return self.start + self.length


class ProducerIdUnavailableError(Exception):
    """No block could be obtained from the controller (COORDINATOR_NOT_AVAILABLE, retriable)."""

    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


# Returns (error code, start, length) of a new block.
AllocateBlock = Callable[[], Awaitable[tuple[int, int, int]]]


class ProducerIdManager:
    def __init__(self, allocate_block: AllocateBlock) -> None:
        self._allocate_block = allocate_block
        self._block: ProducerIdBlock | None = None
        self._next = 0
        self._lock = asyncio.Lock()

    async def generate(self) -> tuple[int, int]:
        """A fresh ``(producer_id, producer_epoch)``; raises ProducerIdUnavailableError."""
        async with self._lock:
            if self._block is None or self._next >= self._block.end:
                code, start, length = await self._allocate_block()
                if code != ErrorCode.NONE or length <= 0:
                    raise ProducerIdUnavailableError(
                        f"the controller did not allocate a producer id block (error {code}); retry"
                    )
                self._block, self._next = ProducerIdBlock(start, length), start
            producer_id = self._next
            self._next += 1
            return producer_id, FIRST_PRODUCER_EPOCH


def controller_block_allocator(
    call: Callable[..., Awaitable], broker_id: int, broker_epoch: Callable[[], int]
) -> AllocateBlock:
    """``AllocateBlock`` over ``call(stub_class, method, request)``
    (``broker.controller_channel.ControllerClient.call``)."""
    from proto import controller_pb2, controller_pb2_grpc

    async def allocate() -> tuple[int, int, int]:
        request = controller_pb2.AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=broker_epoch())
        try:
            response = await call(controller_pb2_grpc.ControllerServiceStub, "AllocateProducerIds", request)
        except Exception as exc:  # any transport or controller failure: retry later
            raise ProducerIdUnavailableError(f"no controller answered AllocateProducerIds: {exc}") from exc
        return response.error.code, response.producer_id_start, response.producer_id_len

    return allocate
