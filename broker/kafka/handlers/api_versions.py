"""ApiVersions (18), v0-4: the APIs and version ranges this broker serves.

Advertise only what is implemented: the codec's schema range of every API a handler is registered
for (``services.api_versions``). librdkafka >= 2.5 starts KIP-714 telemetry when it sees API 71, and
aiokafka gives up when none of its versions falls inside an advertised range, so nothing else is
listed. No features (KIP-584), throttle 0.
"""

from __future__ import annotations

from broker.kafka.handlers.context import BrokerServices, RequestContext
from proto.kafka import messages as m
from proto.kafka.api import ApiKey


def entry(api_key: int, low: int, high: int) -> m.ApiVersionsResponseApiVersion:
    return m.ApiVersionsResponseApiVersion(api_key=api_key, min_version=low, max_version=high)


def handle_api_versions(
    services: BrokerServices, context: RequestContext, request: m.ApiVersionsRequest
) -> m.ApiVersionsResponse:
    return m.ApiVersionsResponse(
        error_code=0,
        api_keys=[entry(key, low, high) for key, (low, high) in services.api_versions.items()],
        throttle_time_ms=0,
    )


HANDLERS = {ApiKey.API_VERSIONS: handle_api_versions}
