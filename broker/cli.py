"""``pykraft broker``: the subcommand's flags (light: the server is imported only to run it)."""

from __future__ import annotations

import argparse
import importlib

from broker.config import add_arguments


def _run(args: argparse.Namespace) -> int:
    return importlib.import_module("broker.server").run(args)


def add_parser(sub: argparse._SubParsersAction) -> None:
    if "broker" in sub.choices:
        return
    p = sub.add_parser("broker", help="run a data broker (partition logs, produce, fetch, replication)")
    add_arguments(p)
    p.set_defaults(func=_run)
