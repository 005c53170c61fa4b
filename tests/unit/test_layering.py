"""Import layering and sans-I/O cores (docs/architecture.md, "Import rules"), checked on the source.

Arrows: pykraft, spark -> proto; broker -> storage, metadata (image only), proto; metadata -> raft,
proto; raft -> proto; storage -> proto. Core modules never import I/O or call module-level random.
One data plane (issue 16): the follower's fetcher speaks Kafka Fetch to the leader's Kafka listener,
clients produce, fetch, list offsets and read metadata on the Kafka listener, and consumer groups are
served there only (``__consumer_offsets`` holds Kafka's own record format); no gRPC ReplicaService,
BrokerService or GroupService exists. gRPC carries only Raft, the controller API and the admin API.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = {"proto", "raft", "metadata", "storage", "broker", "pykraft", "spark"}
ALLOWED = {
    "proto": set(),
    "raft": {"proto"},
    "storage": {"proto"},
    "metadata": {"raft", "proto"},
    "broker": {"storage", "metadata", "proto", "raft"},
    "pykraft": {"proto", "storage"},
    "spark": {"proto", "pykraft", "storage"},
}
# pykraft's process entry points start servers; they may import the server packages lazily.
ENTRY_POINT_EXCEPTIONS = {"pykraft/cli.py", "pykraft/cluster.py", "pykraft/demo.py", "pykraft/cli_admin.py"}
IO_MODULES = {"asyncio", "grpc", "socket", "threading", "time", "os", "subprocess", "select", "selectors"}
CORE_MODULES = [
    "raft/core.py",
    "broker/replica/partition.py",
    "broker/follower/fetcher.py",
    "proto/kafka/fetch_session.py",
    "proto/kafka/connection.py",
    "broker/replica/delayed.py",
    "storage/producer_state.py",
    "storage/compaction.py",
    "broker/group/coordinator.py",
    "broker/group/join_group.py",
    "broker/group/membership.py",
    "broker/group/rebalance.py",
    "broker/group/admin.py",
    "broker/group/metadata_manager.py",
    "broker/group/metadata.py",
    "broker/group/requests.py",
    "broker/group/record_serde.py",
    "metadata/controller.py",
    "metadata/image.py",
]


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def package_files() -> list[Path]:
    return [p for pkg in sorted(ALLOWED) for p in sorted((ROOT / pkg).rglob("*.py"))]


@pytest.mark.parametrize("path", package_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_arrows(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    if rel in ENTRY_POINT_EXCEPTIONS:
        return
    package = rel.split("/", maxsplit=1)[0]
    wrong = (imported_roots(path) & OURS) - ALLOWED[package] - {package}
    assert not wrong, f"{rel} imports {sorted(wrong)}; {package} may import only {sorted(ALLOWED[package])}"


@pytest.mark.parametrize("rel", CORE_MODULES)
def test_cores_are_sans_io(rel: str) -> None:
    path = ROOT / rel
    if not path.exists():
        pytest.skip(f"{rel} is not written yet")
    io = imported_roots(path) & IO_MODULES
    assert not io, f"{rel} is a sans-I/O core but imports {sorted(io)}"
    source = path.read_text()
    assert "random.random(" not in source and "random.randint(" not in source, (
        f"{rel} calls module-level random; inject a seeded random.Random"
    )


def test_replication_is_on_the_kafka_protocol() -> None:
    """The replica fetcher dials the leader's Kafka listener (broker.follower.kafka_client), not gRPC; the
    leader
    answers follower fetches in the Kafka Fetch handler; no ReplicaService is left to serve them."""
    driver = imported_modules(ROOT / "broker/follower/fetcher_driver.py")
    assert "broker.follower.kafka_client" in driver and "grpc" not in {name.split(".")[0] for name in driver}
    assert not (ROOT / "proto/replica.proto").exists() and not (ROOT / "broker/replica_service.py").exists()
    users = [str(p.relative_to(ROOT)) for p in package_files() if "replica_pb2" in p.read_text()]
    assert not users, f"{users} use the retired gRPC ReplicaService"
    assert "handle_replica_fetch" in (ROOT / "broker/kafka/handlers/fetch.py").read_text()


def test_groups_are_on_the_kafka_protocol() -> None:
    """Issue 16 §4: the group coordinator is reached only through the Kafka listener's group handlers;
    no gRPC GroupService (proto/group.proto) is left, nothing imports its generated code, and the
    ``__consumer_offsets`` records are Kafka's schemas, not protobuf."""
    assert not (ROOT / "proto/group.proto").exists()
    assert not list((ROOT / "proto").glob("group_pb2*")), "generated code of the retired GroupService"
    files = [*package_files(), *(ROOT / "bench").glob("*.py"), *(ROOT / "tests").rglob("*.py")]
    users = [str(p.relative_to(ROOT)) for p in files if "group_pb2" in p.read_text() and p != Path(__file__)]
    assert not users, f"{users} use the retired gRPC GroupService"
    server = (ROOT / "broker/server.py").read_text()
    assert "GroupService" not in server and "pykraft.group" not in server
    assert "handle_join_group" in (ROOT / "broker/kafka/handlers/groups.py").read_text()


# Inside broker/: the wings, each a sub-package with one job, and the node modules that wire them. A
# wing may import only the wings listed for it (and itself); the Kafka front (broker/kafka) depends on the
# wings, never the reverse; the node modules (top-level broker/*.py) may import everything. A new module
# must sit in a wing or be added to NODE_MODULES here, on purpose.
BROKER_WINGS: dict[str, set[str]] = {
    "broker/replica": set(),  # hosted partitions, their logs, ISR/HW decisions, purgatories
    "broker/follower": {"broker/replica"},  # the replica fetcher: fetches from leaders, appends locally
    "broker/txn": {"broker/replica"},  # producer ids (and, to come, the transaction coordinator)
    # the group coordinator; its lag metric asks leaders' end offsets with the follower's Kafka client
    "broker/group": {"broker/replica", "broker/follower"},
    "broker/metrics.py": {"broker/replica", "broker/follower", "broker/group", "broker/txn"},
    "broker/kafka": {"broker/replica", "broker/follower", "broker/group", "broker/txn", "broker/metrics.py"},
}
NODE_MODULES = {
    "broker/__init__.py",
    "broker/cli.py",  # the process entry point
    "broker/config.py",  # the broker's settings
    "broker/server.py",  # constructs the wings, starts and stops them in order
    "broker/lifecycle.py",  # register, heartbeat, controlled shutdown
    "broker/controller_channel.py",  # calls to the active controller: AlterPartition, admin forwarding
    "broker/metadata_listener.py",  # follow and replay the metadata log, publish it to the wings
}
# Back-edges still being removed; each names why it exists. The list may only shrink.
KNOWN_BACK_EDGES: set[tuple[str, str]] = set()


def broker_wing_of(rel: str) -> str | None:
    """The wing ``rel`` (a path under broker/, or a dotted ``broker.x.y`` module) belongs to."""
    path = rel.replace(".", "/") if not rel.endswith(".py") else rel
    for wing in BROKER_WINGS:
        stem = wing.removesuffix(".py")
        if path in (stem, wing) or path.startswith(stem + "/"):
            return wing
    return None


def broker_files() -> list[Path]:
    return sorted((ROOT / "broker").rglob("*.py"))


@pytest.mark.parametrize("path", broker_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_broker_modules_sit_in_a_wing_and_import_only_down(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    wing = broker_wing_of(rel)
    if wing is None:
        assert rel in NODE_MODULES, (
            f"{rel} is in no wing of broker/ ({sorted(BROKER_WINGS)}): put it in the wing whose job it "
            "is, or add it to NODE_MODULES if it wires the broker together"
        )
        return
    targets = {broker_wing_of(name) or name for name in imported_modules(path) if name.startswith("broker.")}
    targets |= {w for w in BROKER_WINGS if f"from broker import {w.split('/')[1].removesuffix('.py')}"
                in path.read_text()}
    wrong = {
        t for t in targets - BROKER_WINGS[wing] - {wing}
        if t.startswith("broker/") and (rel, t) not in KNOWN_BACK_EDGES
    }
    node = {t for t in targets if t.startswith("broker.") or t in NODE_MODULES}
    assert not wrong and not node, (
        f"{rel} (wing {wing}) imports {sorted(wrong | node)}; {wing} may import only "
        f"{sorted(BROKER_WINGS[wing])}"
    )


def test_known_back_edges_still_exist() -> None:
    """An exception that is no longer needed is removed from KNOWN_BACK_EDGES, so the list only shrinks."""
    for rel, wing in KNOWN_BACK_EDGES:
        names = imported_modules(ROOT / rel)
        assert any(broker_wing_of(n) == wing for n in names), f"{rel} no longer imports {wing}: drop it"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


# What gRPC carries: the Raft quorum (RaftService; RaftClientService, the raft package's own
# client API), the controller API brokers call, and the admin API.
GRPC_SERVICES = {"RaftService", "RaftClientService", "ControllerService", "AdminService"}
# The gRPC servicers a broker may register: the admin API it forwards to the controllers.
BROKER_SERVICERS = {"AdminService"}


def test_grpc_carries_only_raft_the_controller_api_and_the_admin_api() -> None:
    """No .proto defines a data-plane service (Produce, Fetch, ListOffsets, Metadata, InitProducerId
    and replication are Kafka requests), and no generated code of the retired ones is left."""
    services = {
        name: path.name
        for path in sorted((ROOT / "proto").glob("*.proto"))
        for name in re.findall(r"^service (\w+)", path.read_text(), re.MULTILINE)
    }
    assert set(services) <= GRPC_SERVICES, services
    retired = [
        "proto/broker.proto",
        "proto/broker_pb2.py",
        "proto/broker_pb2_grpc.py",
        "broker/broker_service.py",
    ]
    assert not [p for p in retired if (ROOT / p).exists()]
    users = [str(p.relative_to(ROOT)) for p in package_files() if "broker_pb2" in p.read_text()]
    assert not users, f"{users} use the retired gRPC BrokerService"


def test_no_broker_module_serves_a_grpc_data_plane() -> None:
    """A broker registers gRPC servicers for the admin API only; its data plane is the Kafka listener."""
    registered = {
        str(path.relative_to(ROOT)): set(re.findall(r"add_(\w+?)Servicer_to_server", path.read_text()))
        for path in sorted((ROOT / "broker").rglob("*.py"))
    }
    wrong = {path: names - BROKER_SERVICERS for path, names in registered.items() if names - BROKER_SERVICERS}
    assert not wrong, f"broker modules register gRPC servicers beyond the admin API: {wrong}"
    assert "AdminService" in registered["broker/server.py"]
