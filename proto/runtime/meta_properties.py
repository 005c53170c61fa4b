"""A node's ``meta.properties``: which cluster its data directory belongs to (Kafka's, KIP-631).

Kafka writes ``meta.properties`` into every log directory when the storage is formatted
(``kafka-storage.sh format --cluster-id``) and refuses to start a node whose directory was formatted
for another cluster. pykraft has no separate format step: the cluster id lives in the metadata log
(written once by the first active controller), and each controller and broker writes it here the
first time its image has one. From then on the directory belongs to that cluster: a node that finds
a different id in the metadata log, or is given a different ``cluster.id``, stops with
``InconsistentClusterIdError`` (Kafka's INCONSISTENT_CLUSTER_ID) instead of mixing two clusters' data.

The file, Java-properties style like Kafka's (version 1 = a KRaft directory)::

    #Written by pykraft; do not edit
    version=1
    node.id=101
    cluster.id=MkU3OEVBNTcwNTJENDM2Qg

Written to a temporary file, fsynced and renamed, so a crash leaves the old file or the new one.
"""

from __future__ import annotations

import os
from pathlib import Path

META_PROPERTIES = "meta.properties"
META_PROPERTIES_VERSION = "1"
CLUSTER_ID_KEY = "cluster.id"


class InconsistentClusterIdError(Exception):
    """A data directory, a setting and the metadata log disagree about the cluster id."""


class MetaPropertiesError(Exception):
    """``meta.properties`` exists but does not parse."""


def read_cluster_id(data_dir: Path) -> str | None:
    """The cluster id ``data_dir`` belongs to, or None when it was never written."""
    path = data_dir / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise MetaPropertiesError(f"{path} cannot be read: {exc}") from exc
    values = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise MetaPropertiesError(f"{path}: line {line!r} is not KEY=VALUE; restore or remove the file")
        values[key.strip()] = value.strip()
    cluster_id = values.get(CLUSTER_ID_KEY)
    if not cluster_id:
        raise MetaPropertiesError(f"{path} has no {CLUSTER_ID_KEY}; restore or remove the file")
    return cluster_id


def mismatch(data_dir: Path, stored: str, found: str, where: str) -> InconsistentClusterIdError:
    return InconsistentClusterIdError(
        f"INCONSISTENT_CLUSTER_ID: {data_dir / META_PROPERTIES} belongs to cluster {stored}, but {where} "
        f"is {found}; point this node at the right cluster or give it an empty data directory"
    )


def record_cluster_id(data_dir: Path, node_id: int, cluster_id: str) -> None:
    """Write ``cluster_id`` into ``data_dir``'s meta.properties the first time; afterwards check it.
    Raises ``InconsistentClusterIdError`` when the directory belongs to another cluster."""
    stored = read_cluster_id(data_dir)
    if stored == cluster_id:
        return
    if stored is not None:
        raise mismatch(data_dir, stored, cluster_id, "the metadata log's cluster id")
    path = data_dir / META_PROPERTIES
    tmp = path.with_suffix(".tmp")
    text = (
        f"#Written by pykraft; do not edit\nversion={META_PROPERTIES_VERSION}\n"
        f"node.id={node_id}\n{CLUSTER_ID_KEY}={cluster_id}\n"
    )
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(data_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
