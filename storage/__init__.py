"""The on-disk partition log: Kafka v2 RecordBatch codec, segments, indexes, leader-epoch cache,
checkpoints, recovery and retention. Knows nothing of gRPC, Raft or the network."""
