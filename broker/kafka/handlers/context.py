"""What a Kafka request handler receives: the request's context and the broker's services."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from broker.kafka.handlers.refusals import DEFAULT_INTERVAL_MS, RefusalLog
from broker.replica.replica_manager import ReplicaManager
from broker.txn.producer_ids import ProducerIdManager
from proto.kafka.api import RequestHeader
from proto.kafka.fetch_session import FetchSessionCache


@dataclass(frozen=True, slots=True)
class RequestContext:
    header: RequestHeader
    client: str  # host:port of the peer
    listener: str  # the listener name the request came through (Metadata answers its endpoints)

    @property
    def version(self) -> int:
        return self.header.api_version


@dataclass(frozen=True, slots=True)
class Later:
    """A handler's answer that is not ready yet (an acks=all Produce, a parked Fetch): once ``future`` is
    done, ``finish(its result)`` is the response object. The processor chains a callback on the future
    instead of running a coroutine in a Task per parked request."""

    future: asyncio.Future[Any]
    finish: Callable[[Any], Any]


@dataclass
class BrokerServices:
    """What handlers may call. Add a field for a new kind of handler (groups, admin forwarding)."""

    node_id: int
    manager: ReplicaManager
    clock_ms: Callable[[], int]
    request_timeout_ms: int
    producer_ids: ProducerIdManager | None = None
    # The (api key -> (min, max)) this broker advertises: filled by ``processor.build_handlers``.
    api_versions: dict[int, tuple[int, int]] = dataclasses.field(default_factory=dict)
    groups: Any = None  # broker.group.driver.GroupDriver, for the group APIs
    offsets_topic: Any = None  # broker.group.offsets_topic.OffsetsTopic, for FindCoordinator
    forward_admin: Callable[[str, Any], Awaitable[Any]] | None = None  # admin calls to the controller
    # Followers' incremental fetch sessions (KIP-227); session ids need not be reproducible here.
    fetch_sessions: FetchSessionCache = dataclasses.field(
        default_factory=lambda: FetchSessionCache(random.Random())
    )
    # kafka.sendfile.enable: Fetch answers carry records as file slices, sent with sendfile.
    sendfile: bool = True
    # log.refused.requests.interval.ms: the refused-request lines' rate limit
    # (broker.kafka.handlers.refusals).
    refusal_log_interval_ms: dataclasses.InitVar[int] = DEFAULT_INTERVAL_MS
    refusals: RefusalLog = dataclasses.field(init=False)

    def __post_init__(self, refusal_log_interval_ms: int) -> None:
        self.refusals = RefusalLog(self.clock_ms, refusal_log_interval_ms)


Handler = Callable[[BrokerServices, RequestContext, Any], Any]
