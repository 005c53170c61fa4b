"""The group coordinator of a data broker: Kafka's classic consumer-group protocol (Kafka's
``kafka.coordinator.group``), served on the Kafka listener by ``broker.kafka.handlers.groups``.

Modules, from the wire inwards:

- ``offsets_topic``: FindCoordinator's part (creates ``__consumer_offsets``, names the leader of a
  group's offsets partition);
- ``driver``: the asyncio driver (``GroupDriver``): request ids and futures, appends through the
  replica manager, the timer, loading an offsets partition's log on leadership;
- ``coordinator``: ``GroupCoordinator``, the protocol's sans-I/O core as the driver sees it (every
  request, the timers, leadership of offsets partitions, OffsetCommit); it holds a
  ``GroupMetadataManager`` and passes each request to the module below that owns it;
- ``join_group``: JoinGroup (member ids, KIP-394, static members' takeover, KIP-345/KIP-814);
- ``membership``: SyncGroup, Heartbeat, LeaveGroup and the member fencing checks;
- ``rebalance``: a group's rebalance state machine (join and sync phases, generations, the
  assignment's propagation, member removal) and its timers;
- ``admin``: the requests outside the rebalance protocol (OffsetFetch, ListGroups, DescribeGroups,
  DeleteGroups, OffsetDelete) and ``validate_group_status``, as functions over the manager (sans-I/O);
- ``metadata_manager``: ``GroupMetadataManager``, the groups of the offsets partitions led here, their
  loading, their records and offset expiration (sans-I/O);
- ``metadata``: ``GroupMetadata`` / ``MemberMetadata`` and the records of ``__consumer_offsets`` as
  dataclasses; ``requests``: the core's decoded requests and responses;
- ``record_serde``: those records as bytes, in Kafka's own format;
- ``lag``: the high watermarks of partitions hosted elsewhere, for the consumer-lag gauges.

The sans-I/O modules (``coordinator``, ``join_group``, ``membership``, ``rebalance``, ``admin``,
``metadata_manager``, ``metadata``, ``requests``, ``record_serde``) import no asyncio, socket, time
or os; tests/unit/test_layering.py checks it.
"""
