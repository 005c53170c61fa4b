"""``pykraft demo``: the README's main job."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the demo a newcomer can follow")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("the demo lands with the storage engine")
