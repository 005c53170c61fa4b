"""``pykraft cluster top [--data-dir DIR] [--interval 1.0]``: the live view of ``pykraft.top`` over the
local cluster that ``DATA/cluster.json`` describes (each node's metrics port and the admin addresses)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pykraft.cluster import ClusterError, LocalCluster
from pykraft.top import NodeTarget, run

DEFAULT_INTERVAL_S = 1.0


def add_parser(actions: argparse._SubParsersAction, default_data_dir: Path) -> None:
    top = actions.add_parser(
        "top", help="live view: broker rates and latency, partitions (leader, ISR, HW, LEO), group lag"
    )
    top.add_argument("--data-dir", type=Path, default=default_data_dir,
                     help="the local cluster's data directory (default: %(default)s)")  # fmt: skip
    top.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S,
                     help="seconds between refreshes (default: %(default)s)")  # fmt: skip
    top.add_argument("--iterations", type=int, default=0,
                     help="stop after this many refreshes (default: 0, until Ctrl-C)")  # fmt: skip
    top.set_defaults(func=cluster_top)


def targets(cluster: LocalCluster) -> list[NodeTarget]:
    return [NodeTarget(spec.role, spec.node_id, spec.metrics_url) for spec in cluster.nodes]


def cluster_top(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        print(f"Error: --interval must be > 0 seconds, not {args.interval}", file=sys.stderr)
        return 2
    try:
        cluster = LocalCluster.load(args.data_dir.resolve())
    except ClusterError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    nodes = targets(cluster)
    if not any(t.metrics_url for t in nodes):
        print(f"Error: no node of the cluster in {args.data_dir} serves metrics (--metrics-port -1?)",
              file=sys.stderr)  # fmt: skip
        return 1
    if sys.stdout.isatty():
        # rich takes a COLUMNS/LINES in the environment (a shell may export them) as a fixed size: drop
        # them so that the view follows the terminal's real size, also when it is resized.
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)
    try:
        run(nodes, cluster.controller_addresses, args.interval, args.iterations,
            title=f"pykraft cluster top: {args.data_dir}")  # fmt: skip
    except KeyboardInterrupt:
        return 0  # Ctrl-C is how top ends
    return 0
