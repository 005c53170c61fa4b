"""The metadata quorum: metadata records, the MetadataImage, and the quorum controller (KRaft).

Sans-I/O core (no asyncio, grpc, clock or global randomness):
- ``records``: the record dataclasses and their protobuf codec (one ``MetadataBatch`` per Raft entry);
- ``image``: ``MetadataImage.apply`` — the one replay function, shared by controllers and brokers —
  plus snapshots;
- ``controller``: ``QuorumController`` — handlers generate ``ControllerResult(records, response)``,
  only ``replay`` changes state; ``replication`` (topics, partitions, fencing moves, AlterPartition,
  ElectLeaders), ``partition_change`` (election rules), ``placement``, ``topics`` (validation),
  ``configs``, ``heartbeats`` (broker sessions), ``api`` (request/response dataclasses).

Process side: ``state_machine`` (the Raft driver's state machine and the FetchMetadata tail),
``service`` (the serialised write path and forwarding), ``admin_service``, ``controller_service``,
``convert`` (protobuf at the gRPC edge) and ``server`` (the ``pykraft controller`` process).
"""
