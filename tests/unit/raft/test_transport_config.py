"""raft.config: the static voters string ``1@host:port,2@host:port,3@host:port`` (KRaft's
``controller.quorum.voters``) parsed, with a clear ``QuorumConfigError`` for anything else."""

from __future__ import annotations

import pytest

from raft.config import QuorumConfigError, Voter, format_voters, parse_voters

VALID = [
    pytest.param("1@127.0.0.1:9093", (Voter(1, "127.0.0.1", 9093),), id="single"),
    pytest.param(
        "1@a:1,2@b:2,3@c:3",
        (Voter(1, "a", 1), Voter(2, "b", 2), Voter(3, "c", 3)),
        id="three",
    ),
    pytest.param(
        " 1@h:10 , 2@h:11 ,3@h:12,", (Voter(1, "h", 10), Voter(2, "h", 11), Voter(3, "h", 12)), id="spaces"
    ),
    pytest.param("5@[::1]:9093", (Voter(5, "[::1]", 9093),), id="ipv6"),
]


@pytest.mark.parametrize(("text", "voters"), VALID)
def test_parse_valid(text: str, voters: tuple[Voter, ...]) -> None:
    config = parse_voters(text)
    assert config.voters == voters
    assert parse_voters(format_voters(config)) == config


INVALID = [
    pytest.param("", "no voters given", id="empty"),
    pytest.param("1@127.0.0.1", "expected ID@HOST:PORT", id="no-port"),
    pytest.param("127.0.0.1:9093", "expected ID@HOST:PORT", id="no-id"),
    pytest.param("x@h:1", "positive integer", id="id-not-a-number"),
    pytest.param("0@h:1", "positive integer", id="id-zero"),
    pytest.param("1@h:0", "port must be 1..65535", id="port-zero"),
    pytest.param("1@h:70000", "port must be 1..65535", id="port-too-big"),
    pytest.param("1@h:1,1@h:2,3@h:3", "repeated: [1]", id="duplicate-id"),
    pytest.param("1@h:1,2@h:2", "use an odd number", id="even"),
]


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_parse_invalid(text: str, message: str) -> None:
    """Bad input gets a named error whose message says what to write instead."""
    with pytest.raises(QuorumConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_voters(text)


def test_peers_and_lookup() -> None:
    config = parse_voters("1@a:1,2@b:2,3@c:3")
    assert config.ids == (1, 2, 3)
    assert [v.node_id for v in config.peers_of(2)] == [1, 3]
    assert config.voter(3).address == "c:3"
    with pytest.raises(QuorumConfigError, match="node 4 is not a voter"):
        config.voter(4)


def test_observers_are_members_but_not_voters() -> None:
    """Observers follow the log (Raft learners): peers for the transport, absent from the vote count."""
    config = parse_voters("1@a:1,2@b:2,3@c:3", observers="4@d:4")
    assert config.ids == (1, 2, 3) and config.observer_ids == (4,)
    assert [v.node_id for v in config.peers_of(1)] == [2, 3, 4]
    assert config.member(4).address == "d:4"
    with pytest.raises(QuorumConfigError, match="node 4 is not a voter"):
        config.voter(4)
    with pytest.raises(QuorumConfigError, match=r"unique across voters and observers; repeated: \[3\]"):
        parse_voters("1@a:1,2@b:2,3@c:3", observers="3@d:4")
