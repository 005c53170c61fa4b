"""meta.properties: a data directory belongs to one cluster (Kafka's INCONSISTENT_CLUSTER_ID check)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metadata.records import ClusterIdRecord, encode_batch
from metadata.server import ControllerNode, ControllerSettings, expected_cluster_id
from proto.runtime.meta_properties import (
    META_PROPERTIES,
    InconsistentClusterIdError,
    MetaPropertiesError,
    read_cluster_id,
    record_cluster_id,
)

GIVEN = "MkU3OEVBNTcwNTJENDM2Qg"
OTHER = "q1Sh-9_ISia_zwGINzRvyQ"


def test_written_once_then_checked(tmp_path: Path) -> None:
    assert read_cluster_id(tmp_path) is None
    record_cluster_id(tmp_path, 101, GIVEN)
    text = (tmp_path / META_PROPERTIES).read_text()
    assert "version=1\n" in text and "node.id=101\n" in text and f"cluster.id={GIVEN}\n" in text
    assert read_cluster_id(tmp_path) == GIVEN
    record_cluster_id(tmp_path, 101, GIVEN)  # the same cluster again: nothing to do
    with pytest.raises(InconsistentClusterIdError, match=f"INCONSISTENT_CLUSTER_ID: .*{GIVEN}.*{OTHER}"):
        record_cluster_id(tmp_path, 101, OTHER)
    assert read_cluster_id(tmp_path) == GIVEN
    assert not list(tmp_path.glob("*.tmp"))


def test_kafka_written_file_is_read(tmp_path: Path) -> None:
    """A file as kafka-storage.sh format writes it (comments, other keys)."""
    (tmp_path / META_PROPERTIES).write_text(
        f"#\n#Tue Nov 24 10:00:00 UTC 2026\nnode.id=1\ndirectory.id=abc\nversion=1\ncluster.id={GIVEN}\n"
    )
    assert read_cluster_id(tmp_path) == GIVEN


@pytest.mark.parametrize(
    "text", ["version=1\nnode.id=1\n", "cluster.id\n", "cluster.id=\n"], ids=["no-id", "no-equals", "empty"]
)
def test_damaged_file_is_a_named_error(tmp_path: Path, text: str) -> None:
    (tmp_path / META_PROPERTIES).write_text(text)
    with pytest.raises(MetaPropertiesError, match=META_PROPERTIES):
        read_cluster_id(tmp_path)


def test_controller_setting_must_match_the_data_directory(tmp_path: Path) -> None:
    """A controller given cluster.id refuses a directory formatted for another cluster; without the
    setting it takes the directory's id; with neither the log decides ("")."""
    assert expected_cluster_id(tmp_path, "") == ""
    assert expected_cluster_id(tmp_path, OTHER) == OTHER
    record_cluster_id(tmp_path, 1, GIVEN)
    assert expected_cluster_id(tmp_path, "") == GIVEN
    assert expected_cluster_id(tmp_path, GIVEN) == GIVEN
    with pytest.raises(InconsistentClusterIdError, match=r"cluster\.id"):
        expected_cluster_id(tmp_path, OTHER)


def test_controller_records_the_logs_id_and_stops_on_another(tmp_path: Path, capsys) -> None:
    """The controller process's hook: the first id the log shows goes into meta.properties; a log of
    another cluster than the given cluster.id stops the process with status 2 and a named error."""
    node = ControllerNode(1, "127.0.0.1:0", "1@127.0.0.1:1", tmp_path / "a", ControllerSettings())
    (tmp_path / "a").mkdir()
    node.state_machine.apply(1, encode_batch([ClusterIdRecord(GIVEN)]))
    assert read_cluster_id(tmp_path / "a") == GIVEN
    other = ControllerNode(1, "127.0.0.1:0", "1@127.0.0.1:1", tmp_path, ControllerSettings(cluster_id=OTHER))
    with pytest.raises(SystemExit) as stopped:
        other.state_machine.apply(1, encode_batch([ClusterIdRecord(GIVEN)]))
    assert stopped.value.code == 2
    assert "INCONSISTENT_CLUSTER_ID" in capsys.readouterr().err
    assert read_cluster_id(tmp_path) is None
