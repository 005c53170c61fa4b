"""Kafka's wire protocol: schema files (``schemas/*.json``, format in ``SCHEMA.md``), the codec
generated from them (``messages.py``), its runtime (``codec.py``) and the frame-level API
(``api.py``: headers, ``parse_request``, ``encode_response``)."""
