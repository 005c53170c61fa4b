"""proto.runtime.settings: Kafka-named settings from a properties file, ``PYKRAFT_<NAME>`` environment
variables and ``--override`` flags; later sources win (flags > environment > file > defaults)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proto.runtime.settings import SettingsError, collect_overrides, env_name, read_properties

LAG = "replica.lag.time.max.ms"
KNOWN = {LAG, "num.partitions"}


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("replica.lag.time.max.ms", "PYKRAFT_REPLICA_LAG_TIME_MAX_MS"),
        ("num.partitions", "PYKRAFT_NUM_PARTITIONS"),
        ("controller.quorum.election.timeout.ms", "PYKRAFT_CONTROLLER_QUORUM_ELECTION_TIMEOUT_MS"),
    ],
    ids=["broker", "short", "controller"],
)
def test_env_names(key: str, name: str) -> None:
    """Upper case, dots as underscores, PYKRAFT_ prefix."""
    assert env_name(key) == name


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        ("a.b=1\n", [("a.b", "1")]),
        ("# comment\n! also a comment\n\n  a.b = 1 \n", [("a.b", "1")]),
        ("a.b: 2\n", [("a.b", "2")]),
        ("a.b=x=y\n", [("a.b", "x=y")]),
        ("a.b=\n", [("a.b", "")]),
        ("a=1\nb=2\na=3\n", [("a", "1"), ("b", "2"), ("a", "3")]),
    ],
    ids=["plain", "comments-blank-spaces", "colon", "equals-in-value", "empty-value", "file-order"],
)
def test_properties_file_parsing(tmp_path: Path, text: str, pairs: list[tuple[str, str]]) -> None:
    """Kafka's .properties format: key=value or key: value, # and ! comment lines."""
    path = tmp_path / "server.properties"
    path.write_text(text)
    assert read_properties(path) == pairs


@pytest.mark.parametrize(
    ("text", "named"),
    [("just-a-word\n", ":1"), ("a=1\n=2\n", ":2")],
    ids=["no-separator", "empty-key"],
)
def test_bad_properties_lines_are_named(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "server.properties"
    path.write_text(text)
    with pytest.raises(SettingsError, match=f"server.properties{named}"):
        read_properties(path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"nope\.properties"):
        read_properties(tmp_path / "nope.properties")


@pytest.mark.parametrize(
    ("file", "env", "flags", "winner"),
    [
        ("replica.lag.time.max.ms=1\n", {}, [], "1"),
        ("replica.lag.time.max.ms=1\n", {"PYKRAFT_REPLICA_LAG_TIME_MAX_MS": "2"}, [], "2"),
        (
            "replica.lag.time.max.ms=1\n",
            {"PYKRAFT_REPLICA_LAG_TIME_MAX_MS": "2"},
            ["replica.lag.time.max.ms=3"],
            "3",
        ),
        ("", {"PYKRAFT_REPLICA_LAG_TIME_MAX_MS": "2"}, [], "2"),
        ("", {}, ["replica.lag.time.max.ms=3"], "3"),
        ("", {}, [], None),
    ],
    ids=["file", "env-over-file", "flag-over-env", "env-only", "flag-only", "default"],
)
def test_precedence(
    tmp_path: Path, file: str, env: dict[str, str], flags: list[str], winner: str | None
) -> None:
    """flags > environment > file > defaults: the last item for a key wins in the merged list."""
    path = tmp_path / "server.properties"
    path.write_text(file)
    items = collect_overrides(flags, KNOWN, env, path)
    values = dict(item.split("=", 1) for item in items)
    assert values.get("replica.lag.time.max.ms") == winner


def test_only_known_env_names_are_read() -> None:
    """Other PYKRAFT_* variables (e.g. the image's PYKRAFT_NODE_ID) are not settings."""
    env = {"PYKRAFT_NODE_ID": "1", "PYKRAFT_NUM_PARTITIONS": "4", "NUM_PARTITIONS": "9"}
    assert collect_overrides([], KNOWN, env) == ["num.partitions=4"]
