"""InitProducerId (22), v0-4: a producer id for an idempotent producer.

Ids come from blocks the controller allocates (``broker.txn.producer_ids``); the partition leaders
deduplicate by (producer id, epoch, sequence). Without a transactional id Kafka hands out a fresh id
with epoch 0 whatever ``producer_id``/``producer_epoch`` the request carries (KIP-360's bump is for
transactional producers), and so does pykraft. Transactions are not served yet: a transactional id
gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which Kafka's clients report as a fatal error naming the
transactional id (a retriable code would make them retry forever).
"""

from __future__ import annotations

from broker.kafka.handlers.context import BrokerServices, RequestContext
from broker.txn.producer_ids import ProducerIdUnavailableError
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.api import ApiKey
from proto.kafka_types import NO_PRODUCER_EPOCH, NO_PRODUCER_ID


async def handle_init_producer_id(
    services: BrokerServices, context: RequestContext, request: m.InitProducerIdRequest
) -> m.InitProducerIdResponse:
    if request.transactional_id is not None:
        return _error(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if services.producer_ids is None:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    try:
        producer_id, epoch = await services.producer_ids.generate()
    except ProducerIdUnavailableError as exc:
        return _error(exc.code)
    return m.InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id,
                                    producer_epoch=epoch)  # fmt: skip


def _error(code: int) -> m.InitProducerIdResponse:
    return m.InitProducerIdResponse(
        throttle_time_ms=0, error_code=code, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH
    )


HANDLERS = {ApiKey.INIT_PRODUCER_ID: handle_init_producer_id}
