"""Static quorum membership: ``1@host:port,2@host:port,3@host:port`` (KRaft's ``controller.quorum.voters``).

A voter is a positive node id and the ``host:port`` of its RaftService. The issue allows 3 or 5
voters (any odd count from 1 is accepted so a single-node quorum can be used in tests); ids are
unique. Observers are not listed here: they only receive committed entries.

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

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(v.node_id for v in self.voters)

    def voter(self, node_id: int) -> Voter:
        for v in self.voters:
            if v.node_id == node_id:
                return v
        raise QuorumConfigError(f"node {node_id} is not a voter of {format_voters(self)}")

    def peers_of(self, node_id: int) -> tuple[Voter, ...]:
        return tuple(v for v in self.voters if v.node_id != node_id)


def format_voters(config: QuorumConfig) -> str:
    return ",".join(f"{v.node_id}@{v.address}" for v in config.voters)


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


def parse_voters(text: str) -> QuorumConfig:
    """Parse ``1@host:port,2@host:port,...``; raise ``QuorumConfigError`` on anything else."""
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise QuorumConfigError("no voters given; expected e.g. 1@127.0.0.1:9093,2@127.0.0.1:9094,3@...")
    voters = tuple(_parse_voter(item) for item in items)
    ids = [v.node_id for v in voters]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise QuorumConfigError(f"voter ids must be unique; repeated: {duplicates}")
    if len(voters) % 2 == 0:
        raise QuorumConfigError(f"{len(voters)} voters: use an odd number (3 or 5) so a majority is unique")
    return QuorumConfig(voters=voters)
