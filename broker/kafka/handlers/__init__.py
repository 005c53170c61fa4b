"""Kafka request handlers: one small module per API family, dispatched by ``processor``."""
