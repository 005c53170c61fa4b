"""``pykraft groups``: the plans and refusals of kafka-consumer-groups.sh, against a fake admin.

The fake stands in for ``KafkaGroupAdmin`` (the CLI's actions take it as their first argument); the
real one (confluent-kafka's Admin API against a cluster) is exercised by tests/e2e/test_groups_cli.py.
"""

from __future__ import annotations

import argparse
import json

import pytest

from proto import errors
from proto.errors import ErrorCode
from proto.kafka_types import TopicPartition
from pykraft import cli_groups
from pykraft.cli import build_parser
from pykraft.cli_admin import UsageError
from pykraft.cli_kafka import (
    ClientError,
    ConsumerGroupDescription,
    GroupListing,
    MemberDescription,
    TopicPartitions,
)

T0, T1, T2 = (TopicPartition("orders", p) for p in range(3))


class FakeAdmin:
    def __init__(self, state: str = "Empty", members: tuple[MemberDescription, ...] = ()) -> None:
        self.state = state
        self.members = members
        self.committed = {T0: 5, T1: 40}
        self.earliest = {T0: 2, T1: 0, T2: 0}
        self.latest = {T0: 10, T1: 50, T2: 7}
        self.by_time = {T0: 3, T1: 45, T2: 7}
        self.altered: list[tuple[str, dict]] = []
        self.deleted: list[str] = []

    def describe_consumer_group(self, group: str) -> ConsumerGroupDescription:
        return ConsumerGroupDescription(group, self.state, "range", 101, self.members)

    def list_consumer_group_offsets(self, group: str) -> dict:
        return dict(self.committed)

    def list_offsets(self, partitions, spec) -> dict:
        table = {"earliest": self.earliest, "latest": self.latest}.get(spec, self.by_time)
        return {tp: table[tp] for tp in partitions}

    def describe_topics(self, names):
        return [TopicPartitions(n, (0, 1, 2)) if n == "orders"
                else TopicPartitions(n, (), errors.error_for(3, "no such topic")) for n in names]

    def alter_consumer_group_offsets(self, group: str, offsets: dict) -> None:
        self.altered.append((group, dict(offsets)))

    def list_consumer_groups(self, states):
        return [GroupListing("a", "consumer", "Stable"), GroupListing("b", "consumer", "Empty")]

    def delete_consumer_groups(self, groups):
        self.deleted += groups
        failures = {"busy": errors.error_for(ErrorCode.NON_EMPTY_GROUP, "has members"),
                    "far": ClientError("_TIMED_OUT (-185): Local: Timed out")}
        return {g: failures.get(g) for g in groups}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["groups", *argv, "--bootstrap", "127.0.0.1:1"])


def run(admin: FakeAdmin, *argv: str) -> int:
    args = parse(*argv)
    action = {"list": cli_groups._list, "describe": cli_groups._describe,
              "reset-offsets": cli_groups._reset_offsets, "delete": cli_groups._delete}[args.action]
    return action(admin, args)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        pytest.param(["--to-earliest"], {T0: 2, T1: 0, T2: 0}, id="earliest"),
        pytest.param(["--to-latest"], {T0: 10, T1: 50, T2: 7}, id="latest-is-hw"),
        pytest.param(["--to-offset", "8"], {T0: 8, T1: 8, T2: 7}, id="offset-clamped-to-hw"),
        pytest.param(["--to-offset", "1"], {T0: 2, T1: 1, T2: 1}, id="offset-clamped-to-log-start"),
        pytest.param(["--to-datetime", "2026-11-23T18:00:00.000"], {T0: 3, T1: 45, T2: 7}, id="datetime"),
    ],
)
def test_reset_plan_per_spec_is_clamped_into_the_readable_range(flags, expected, capsys):
    """Kafka's tool clamps a new offset into [log start offset, high watermark]."""
    admin = FakeAdmin()
    assert run(admin, "reset-offsets", "g", "--topic", "orders", *flags, "--execute") == 0
    assert admin.altered == [("g", expected)]
    assert "NEW-OFFSET" in capsys.readouterr().out


def test_shift_by_moves_committed_offsets_and_needs_them():
    admin = FakeAdmin()
    assert run(admin, "reset-offsets", "g", "--topic", "orders:0,1", "--shift-by", "-4", "--execute") == 0
    assert admin.altered == [("g", {T0: 2, T1: 36})]  # 5-4=1 clamps to log start 2
    with pytest.raises(UsageError, match="needs a committed offset"):
        run(admin, "reset-offsets", "g", "--topic", "orders:2", "--shift-by", "1")


def test_reset_is_a_dry_run_unless_execute(capsys):
    admin = FakeAdmin()
    assert run(admin, "reset-offsets", "g", "--all-topics", "--to-earliest") == 0
    assert admin.altered == []
    captured = capsys.readouterr()
    assert "orders" in captured.out and "Dry run" in captured.err


@pytest.mark.parametrize("state", ["Stable", "PreparingRebalance", "CompletingRebalance"])
def test_reset_refuses_an_active_group_and_changes_nothing(state, capsys):
    admin = FakeAdmin(state=state)
    assert run(admin, "reset-offsets", "g", "--all-topics", "--to-earliest", "--execute") == 1
    assert admin.altered == []
    assert f"inactive, but the current state is {state}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["--topic", "orders:x", "--to-earliest"], "partitions must be integers", id="bad-partition"
        ),
        pytest.param(["--topic", "orders", "--to-datetime", "yesterday"], "not a time", id="bad-datetime"),
        pytest.param(["--topic", "orders", "--to-earliest", "--execute", "--dry-run"], "not both",
                     id="execute-and-dry-run"),
    ],
)
def test_reset_bad_flags_are_named(argv, message):
    with pytest.raises(UsageError, match=message):
        run(FakeAdmin(), "reset-offsets", "g", *argv)


def test_reset_of_an_unknown_topic_raises_its_error():
    with pytest.raises(errors.KafkaError, match="no such topic"):
        run(FakeAdmin(), "reset-offsets", "g", "--topic", "nope", "--to-earliest")


def test_all_topics_without_commits_asks_for_topics():
    admin = FakeAdmin()
    admin.committed = {}
    with pytest.raises(UsageError, match="no committed offsets"):
        run(admin, "reset-offsets", "g", "--all-topics", "--to-earliest")


def test_describe_shows_current_offset_hw_lag_and_owner(capsys):
    member = MemberDescription("m-1", None, "cli", "/127.0.0.1", (T0, T2))
    assert run(FakeAdmin(state="Stable", members=(member,)), "describe", "g") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"]
    rows = {tuple(line.split()[1:3]): line.split() for line in lines[1:]}
    assert rows[("orders", "0")][3:9] == ["5", "10", "5", "m-1", "/127.0.0.1", "cli"]
    assert rows[("orders", "1")][3:9] == ["40", "50", "10", "-", "-", "-"]  # committed, unowned
    assert rows[("orders", "2")][3:9] == ["-", "7", "-", "m-1", "/127.0.0.1", "cli"]  # owned, no commit


def test_describe_members_and_state_views(capsys):
    member = MemberDescription("m-1", "static-1", "cli", "/127.0.0.1", (T0,))
    admin = FakeAdmin(state="Stable", members=(member,))
    assert run(admin, "describe", "--group", "g", "--members") == 0
    out = capsys.readouterr().out
    assert "static-1" in out and "orders-0" in out
    assert run(admin, "describe", "g", "--state", "--json") == 0
    state = json.loads(capsys.readouterr().out)
    assert state["state"] == "Stable" and state["assignor"] == "range" and state["coordinator"] == 101
    assert run(admin, "describe", "g", "--members", "--json") == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert shown["assignment"] == [{"topic": "orders", "partition": 0}]


def test_describe_of_a_dead_group_says_it_does_not_exist(capsys):
    assert run(FakeAdmin(state="Dead"), "describe", "ghost") == 1
    assert "does not exist" in capsys.readouterr().err


def test_list_and_delete(capsys):
    admin = FakeAdmin()
    assert run(admin, "list") == 0
    assert capsys.readouterr().out.split() == ["a", "b"]
    assert run(admin, "delete", "a", "busy") == 1
    captured = capsys.readouterr()
    assert "('a') was successful" in captured.out and "NON_EMPTY_GROUP (68)" in captured.err
    assert run(admin, "delete", "far") == 1
    assert "deleting group 'far' failed: _TIMED_OUT (-185)" in capsys.readouterr().err
    with pytest.raises(UsageError):
        run(admin, "delete")
