"""Broker sessions on the active controller: when each broker last heartbeated.

Kafka's ``BrokerHeartbeatManager``. This state is soft and local to the active controller — it is
not in the metadata log. A controller that becomes active starts every registered broker's session
afresh (``start_sessions``), so a leader change never fences brokers that were heartbeating to the
old leader. A broker whose last contact is older than ``broker.session.timeout.ms`` is due to be
fenced. Time is passed in (``now_ms``); nothing here reads a clock.
"""

from __future__ import annotations

from collections.abc import Iterable


class BrokerHeartbeatManager:
    def __init__(self, session_timeout_ms: int) -> None:
        assert session_timeout_ms > 0, f"session timeout {session_timeout_ms} ms"
        self.session_timeout_ms = session_timeout_ms
        self.last_contact_ms: dict[int, int] = {}
        self.metadata_offset: dict[int, int] = {}

    def start_sessions(self, broker_ids: Iterable[int], now_ms: int) -> None:
        self.last_contact_ms = dict.fromkeys(broker_ids, now_ms)
        self.metadata_offset = {}

    def touch(self, broker_id: int, now_ms: int, metadata_offset: int | None = None) -> None:
        self.last_contact_ms[broker_id] = max(now_ms, self.last_contact_ms.get(broker_id, now_ms))
        if metadata_offset is not None:
            self.metadata_offset[broker_id] = metadata_offset

    def forget(self, broker_id: int) -> None:
        self.last_contact_ms.pop(broker_id, None)
        self.metadata_offset.pop(broker_id, None)

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        last = self.last_contact_ms.get(broker_id)
        return last is not None and now_ms - last <= self.session_timeout_ms

    def expired(self, broker_ids: Iterable[int], now_ms: int) -> list[int]:
        """Brokers among ``broker_ids`` whose session has run out (never-seen brokers start now)."""
        out = []
        for broker_id in broker_ids:
            last = self.last_contact_ms.setdefault(broker_id, now_ms)
            if now_ms - last > self.session_timeout_ms:
                out.append(broker_id)
        return sorted(out)

    def next_deadline_ms(self, broker_ids: Iterable[int]) -> int | None:
        """When the earliest session among ``broker_ids`` runs out (None when there is none)."""
        lasts = [self.last_contact_ms[b] for b in broker_ids if b in self.last_contact_ms]
        return min(lasts) + self.session_timeout_ms + 1 if lasts else None
