"""The ``pykraft`` command line.

Each subcommand lives in its own module and registers itself through ``COMMANDS``: a name, a
one-line help and the dotted path of a ``register(subparsers)`` function. Modules are imported only
when needed so that ``pykraft --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

# name -> module providing ``add_parser(subparsers)``; the parser sets ``func``.
COMMANDS: dict[str, str] = {
    "demo": "pykraft.demo",
    "controller": "pykraft.cli_admin",
    "topics": "pykraft.cli_admin",
    "quorum": "pykraft.cli_admin",
    "produce": "pykraft.cli_client",
    "consume": "pykraft.cli_client",
    "cluster": "pykraft.cli_cluster",
    "groups": "pykraft.cli_groups",
    "broker": "broker.cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pykraft", description="A Kafka-style, Raft-replicated log.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMANDS.values():
        importlib.import_module(module_name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs a subcommand. A closed stdout (``pykraft topics describe | head -1``) ends the command
    quietly with 128 + SIGPIPE, as Unix tools do; Ctrl-C ends it with 128 + SIGINT, without a traceback
    (``consume`` prints its summary first)."""
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush cannot fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
