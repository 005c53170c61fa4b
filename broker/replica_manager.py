"""Design notes for the replica manager: how the broker wires its cores to the log and the network.

Not written yet; this docstring is the plan the implementation follows. Each step names the core
call that decides and the driver call that acts, so the order of effects is fixed here once.

Objects (one broker process)
----------------------------
- ``storage.log.Log`` per hosted partition (the bytes), opened at startup (recovery happens there).
- ``broker.partition.Partition`` per hosted partition (HW, ISR, epochs): the decisions.
- ``broker.fetcher.ReplicaFetcher`` per leader broker this broker follows partitions on.
- ``broker.purgatory.ProducePurgatory`` and ``FetchPurgatory`` (delayed acks=all produces, long polls).
- The ``metadata.image.MetadataImage`` the broker follows as an observer; ``PartitionRegistration``
  gives ``leader``, ``leader_epoch``, ``partition_epoch``, ``isr``, ``replicas``.
Everything above runs on one asyncio loop; the gRPC handlers and the fetcher tasks only move bytes.

Metadata delta -> role changes (Kafka's ``ReplicaManager.applyDelta``)
-------------------------------------------------------------------------
For each partition of the delta hosted here, with ``reg`` its registration:

- ``reg.leader == this broker``: if this is a new leadership (role or epoch), first
  ``log.leader_epoch_cache.assign(reg.leader_epoch, log.log_end_offset)`` — a new leader's epoch
  starts at its LEO before any append (Kafka's makeLeader) — then ``partition.become_leader(
  reg.leader_epoch, reg.partition_epoch, reg.isr, reg.replicas, log.log_end_offset,
  log.high_watermark, now_ms, log.log_start_offset)``; remove the partition from its fetcher; then
  ``maybe_increment_high_watermark()`` and, if it moved, ``log.update_high_watermark`` and wake both
  purgatories for the partition.
- otherwise: ``partition.become_follower(reg.leader, ...)``. If it returns True: complete the
  partition's delayed produces (``ProducePurgatory.check_and_complete`` now answers
  NOT_LEADER_OR_FOLLOWER), wake its delayed fetches, and ``fetcher_for(reg.leader).add_partition(
  tp, log.log_end_offset, log.latest_epoch, reg.leader_epoch)``. **No truncation here**: the
  leader's diverging epoch decides it (KIP-101).
- partition removed or moved away: ``partition.stop()``, remove from fetchers, fail its delayed
  operations, close (and for a deleted topic, delete) the log.

Produce (BrokerService.Produce)
-------------------------------
Per partition, in order: unknown topic -> UNKNOWN_TOPIC_OR_PARTITION; ``partition.check_append(acks,
current_leader_epoch)`` (leadership, FENCED/UNKNOWN_LEADER_EPOCH, acks, NOT_ENOUGH_REPLICAS with
nothing appended); ``log.append_as_leader(records, partition.leader_epoch)`` (header/CRC/size/codec
validation, all or nothing: its KafkaError becomes the partition's error); then
``partition.on_local_append(log.log_end_offset)`` (an ISR of one moves the HW at once); wake the
FetchPurgatory for the partition (followers long-polling for new data). acks=0/1 answer now. acks=all:
``ProducePurgatory.try_complete_else_watch(op, now + timeout_ms, {tp: ProduceWait(last offset + 1,
leader_epoch)}, check)`` with ``check = partition.check_enough_replicas_reach_offset``; the gRPC
handler awaits a future the driver resolves when the operation completes or expires.

Follower fetch (ReplicaService.Fetch, on the leader)
----------------------------------------------------
Refuse a ``broker_epoch`` older than the image's registration of ``replica_id`` (STALE_BROKER_EPOCH).
Per partition: ``result = partition.handle_follower_fetch(replica_id, fetch_offset,
last_fetched_epoch, current_leader_epoch, log.leader_epoch_cache.entries, now_ms, broker_epoch)``.
With an error or a diverging epoch: answer it, no records. Otherwise: if
``result.high_watermark_advanced_from`` is set, ``log.update_high_watermark(partition.high_watermark)``
and ``check_and_complete`` both purgatories for the partition; if ``result.isr_proposal``, send
AlterPartition (below). Read ``log.read(fetch_offset, partition_max_bytes)`` (up to the LEO). If no
partition has data, park the request in the FetchPurgatory (``min_bytes``, ``max_wait_ms``) — a
leader append wakes it.

Follower side (the fetcher task per leader broker)
--------------------------------------------------
Loop: ``plan = fetcher.build_request(now_ms)``; send it (one outstanding request per leader);
``actions = fetcher.handle_response(plan.request_id, answers, local_view, now_ms)`` where
``local_view(tp) = LocalLogView(log.leader_epoch_cache.entries, log.log_end_offset,
partition.high_watermark)``; apply each action:
``AppendRecords`` -> ``log.append_as_follower(records)``, ``partition.on_local_append(leo)``,
``partition.update_follower_high_watermark(leader_hw)`` and ``log.update_high_watermark``;
``TruncateTo`` -> ``log.truncate_to(offset)``, ``partition.on_local_truncate(log.log_end_offset)``;
``TruncateFullyAndStartAt`` -> ``log.truncate_fully_and_start_at(offset)``,
``partition.on_local_truncate_fully(offset)``;
``Fenced`` / ``BackedOff`` -> nothing (the metadata log or the backoff decides).
Then ``fetcher.update_position(tp, log.log_end_offset, log.latest_epoch)``. A failed call is
``handle_request_failure``; wait until ``next_wake_ms`` when nothing is ready.

ISR maintenance
---------------
A timer every ``replica_lag_time_max_ms / 2`` calls ``partition.maybe_shrink_isr(now_ms)`` on every
leader partition; expansions come from ``handle_follower_fetch``. A proposal goes to the active
controller as AlterPartition (leader id, broker epoch, leader epoch, partition epoch, new ISR); its
answer goes to ``partition.handle_alter_partition_response(proposal, error, leader_epoch,
partition_epoch, isr)``; an old HW returned means the HW moved: update the log and wake purgatories.
Transport errors are retried with backoff; the proposal stays pending meanwhile (no second one).

Consumer fetch and ListOffsets
------------------------------
``partition.handle_consumer_fetch(fetch_offset, current_leader_epoch, last_fetched_epoch,
log.leader_epoch_cache.entries)``; read ``log.read(fetch_offset, partition_max_bytes,
max_offset=result.max_offset)`` so nothing at or above the HW is returned; long-poll as above, woken
when the HW moves. ListOffsets: EARLIEST = ``log.log_start_offset``, LATEST = ``partition.high_watermark``,
TIMESTAMP = ``log.offset_for_timestamp`` limited to offsets below the HW.

Durability and shutdown
-----------------------
Every few seconds and at shutdown: ``log.write_checkpoints()`` (HW, log start, recovery point). The
HW read back at startup is capped at the LEO by the log; ``become_leader`` keeps the larger of it and
what the partition knew. Controlled shutdown: ask the controller, wait until no partition is led
here, stop fetchers, close logs.
"""
