"""The group coordinator of a data broker: Kafka's classic consumer-group protocol (Kafka's
``kafka.coordinator.group``), served on the Kafka listener by ``broker.handlers.groups``.

Modules, from the wire inwards:

- ``offsets_topic``: FindCoordinator's part (creates ``__consumer_offsets``, names the leader of a
  group's offsets partition);
- ``driver``: the asyncio driver (``GroupDriver``): request ids and futures, appends through the
  replica manager, the timer, loading an offsets partition's log on leadership;
- ``coordinator``: ``GroupCoordinator``, the protocol as a sans-I/O core (JoinGroup, SyncGroup,
  Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups,
  OffsetDelete, timers); it holds a ``GroupMetadataManager``;
- ``admin``: the requests outside the rebalance protocol (OffsetFetch, ListGroups, DescribeGroups,
  DeleteGroups, OffsetDelete) and ``validate_group_status``, as functions over the manager (sans-I/O);
- ``metadata_manager``: ``GroupMetadataManager``, the groups of the offsets partitions led here, their
  loading, their records and offset expiration (sans-I/O);
- ``metadata``: ``GroupMetadata`` / ``MemberMetadata`` and the records of ``__consumer_offsets`` as
  dataclasses; ``requests``: the core's decoded requests and responses;
- ``record_serde``: those records as bytes, in Kafka's own format;
- ``lag``: the high watermarks of partitions hosted elsewhere, for the consumer-lag gauges.

The sans-I/O modules (``coordinator``, ``admin``, ``metadata_manager``, ``metadata``, ``requests``,
``record_serde``) import no asyncio, socket, time or os; tests/unit/test_layering.py checks it.
"""
