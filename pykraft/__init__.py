"""pykraft: a Kafka-style, Raft-replicated log. The user-facing client package and command line."""

__version__ = "0.1.0"
