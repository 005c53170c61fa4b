"""Raft consensus: a sans-I/O core, its durable store (rocksdict), snapshots, the gRPC transport and
the asyncio driver. Knows nothing of Kafka: it replicates opaque entries."""
