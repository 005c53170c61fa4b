"""Static quorum membership: ``1@host:port,2@host:port,3@host:port`` (KRaft's ``controller.quorum.voters``).

A voter is a positive node id and the ``host:port`` of its RaftService. The issue allows 3 or 5
voters (any odd count from 1 is accepted so a single-node quorum can be used in tests); ids are
unique. Observers (given in the same form, separately) only receive committed entries: they never
vote and are never counted.

Bad input raises ``QuorumConfigError`` (a ``ValueError``) with a message saying what to write instead.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_PORT = 65535


class QuorumConfigError(ValueError):
    """The voters string cannot be used; the message says why and shows the expected form."""


@dataclass(frozen=True, slots=True)
class Voter:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    voters: tuple[Voter, ...]
    observers: tuple[Voter, ...] = ()  # receive committed entries only; never vote or count

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(v.node_id for v in self.voters)

    @property
    def observer_ids(self) -> tuple[int, ...]:
        return tuple(v.node_id for v in self.observers)

    def member(self, node_id: int) -> Voter:
        """The voter or observer ``node_id``; ``QuorumConfigError`` if it is neither."""
        for v in self.voters + self.observers:
            if v.node_id == node_id:
                return v
        raise QuorumConfigError(f"node {node_id} is neither a voter nor an observer of {format_voters(self)}")

    def voter(self, node_id: int) -> Voter:
        for v in self.voters:
            if v.node_id == node_id:
                return v
        raise QuorumConfigError(f"node {node_id} is not a voter of {format_voters(self)}")

    def peers_of(self, node_id: int) -> tuple[Voter, ...]:
        """Every other voter and observer: the nodes ``node_id`` may exchange Raft messages with."""
        return tuple(v for v in self.voters + self.observers if v.node_id != node_id)


def format_voters(config: QuorumConfig) -> str:
    text = ",".join(f"{v.node_id}@{v.address}" for v in config.voters)
    if config.observers:
        text += " (observers " + ",".join(f"{v.node_id}@{v.address}" for v in config.observers) + ")"
    return text


def _parse_voter(item: str) -> Voter:
    expected = "expected ID@HOST:PORT, e.g. 1@127.0.0.1:9093"
    node, sep, address = item.strip().partition("@")
    host, colon, port = address.rpartition(":")
    if not sep or not colon or not host:
        raise QuorumConfigError(f"voter {item!r}: {expected}")
    if not node.isdigit() or int(node) <= 0:
        raise QuorumConfigError(f"voter {item!r}: the id must be a positive integer; {expected}")
    if not port.isdigit() or not 0 < int(port) <= MAX_PORT:
        raise QuorumConfigError(f"voter {item!r}: the port must be 1..{MAX_PORT}; {expected}")
    return Voter(node_id=int(node), host=host, port=int(port))


def _parse_list(text: str) -> tuple[Voter, ...]:
    return tuple(_parse_voter(item) for item in text.split(",") if item.strip())


def parse_voters(text: str, observers: str = "") -> QuorumConfig:
    """Parse ``1@host:port,2@host:port,...`` (and observers in the same form); raise
    ``QuorumConfigError`` on anything else."""
    voters = _parse_list(text)
    if not voters:
        raise QuorumConfigError("no voters given; expected e.g. 1@127.0.0.1:9093,2@127.0.0.1:9094,3@...")
    observer_list = _parse_list(observers)
    ids = [v.node_id for v in voters + observer_list]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise QuorumConfigError(
            f"node ids must be unique across voters and observers; repeated: {duplicates}"
        )
    if len(voters) % 2 == 0:
        raise QuorumConfigError(f"{len(voters)} voters: use an odd number (3 or 5) so a majority is unique")
    return QuorumConfig(voters=voters, observers=observer_list)
