"""``pykraft controller``, ``pykraft topics ...``, ``pykraft quorum describe`` (and ``cluster describe``).

Shapes follow Kafka's tools (``kafka-topics.sh``, ``kafka-configs.sh``, ``kafka-metadata-quorum.sh``):

    pykraft controller --node-id 1 --listen 127.0.0.1:9093 --voters 1@...,2@...,3@... --data-dir DIR
    pykraft topics create --bootstrap HOST:PORT --topic T --partitions 3 --replication-factor 3 \\
        [--config retention.ms=60000] [--replica-assignment 1:2:3,2:3:1] [--validate-only] [--if-not-exists]
    pykraft topics list|describe [--topic T]|delete --topic T --bootstrap HOST:PORT
    pykraft topics alter-config --topic T --set k=v [--delete k] --bootstrap HOST:PORT   (--cluster: defaults)
    pykraft topics add-partitions --topic T --partitions N --bootstrap HOST:PORT
    pykraft topics describe-config --topic T|--cluster --bootstrap HOST:PORT
    pykraft topics elect-leaders [--election preferred|unclean] [--topic T [--partition P]] --bootstrap ...
    pykraft quorum describe --bootstrap HOST:PORT
    pykraft cluster describe --bootstrap HOST:PORT   (registered by the ``cluster`` command's module
                                                      through ``add_cluster_describe``)

Output is a human-readable table by default and JSON with ``--json``. A failure prints
``Error: <CODE_NAME> (<code>): <message>`` on stderr and exits non-zero; nothing prints a traceback.
``--bootstrap`` defaults to ``$PYKRAFT_BOOTSTRAP``.

This module registers several top-level commands; ``add_parser`` is idempotent so that each of its
``COMMANDS`` entries may call it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from proto import errors

EXIT_ERROR = 1
EXIT_USAGE = 2
MY_COMMANDS = ("controller", "topics", "quorum")


class UsageError(Exception):
    """A flag value that cannot be used; the message says what to write instead."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    if "controller" not in sub.choices:
        _add_controller(sub)
    if "topics" not in sub.choices:
        _add_topics(sub)
    if "quorum" not in sub.choices:
        q = sub.add_parser("quorum", help="the metadata quorum (like kafka-metadata-quorum.sh)")
        qs = q.add_subparsers(dest="action", required=True, metavar="ACTION")
        _common(qs.add_parser("describe", help="leader, epoch, high watermark and each voter's lag"))
        q.set_defaults(func=lambda a: _run(a, _quorum_describe))


def add_cluster_describe(cluster_actions: argparse._SubParsersAction) -> None:
    """For the ``pykraft cluster`` command's module: adds ``describe`` to its actions."""
    p = cluster_actions.add_parser(
        "describe", help="cluster id, brokers (endpoints, rack, fenced) and the active controller"
    )
    _common(p)
    p.set_defaults(func=lambda a: _run(a, _cluster_describe))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap",
        "--bootstrap-server",
        dest="bootstrap",
        default=os.environ.get("PYKRAFT_BOOTSTRAP"),
        help="HOST:PORT[,HOST:PORT] of any controller or broker (their gRPC address: it forwards to the "
        "active controller; default $PYKRAFT_BOOTSTRAP, which `pykraft cluster up` prints)",
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to keep retrying (default 30)")


def _add_controller(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("controller", help="run a controller (one voter of the metadata quorum)")
    from metadata import server

    server.add_arguments(p)
    p.set_defaults(func=server.run)


def _add_topics(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("topics", help="create, list, describe, delete and configure topics")
    ts = t.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = ts.add_parser("create", help="create a topic")
    _common(c)
    c.add_argument("--topic", required=True)
    c.add_argument(
        "--partitions", type=int, default=-1,
        help="number of partitions; -1 = the cluster default, num.partitions (default -1)",
    )  # fmt: skip
    c.add_argument(
        "--replication-factor", type=int, default=-1,
        help="replicas per partition; -1 = the cluster default, default.replication.factor (default -1)",
    )  # fmt: skip
    c.add_argument(
        "--replica-assignment", help="broker lists per partition: 1:2:3,2:3:1 (partition 0, 1, ...)"
    )
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    c.add_argument("--validate-only", action="store_true")
    c.add_argument("--if-not-exists", action="store_true", help="succeed when the topic exists already")
    c.set_defaults(func=lambda a: _run(a, _topics_create))
    lst = ts.add_parser("list", help="topic names")
    _common(lst)
    lst.set_defaults(func=lambda a: _run(a, _topics_list))
    d = ts.add_parser("describe", help="partitions: leader, replicas, ISR, leader epoch")
    _common(d)
    d.add_argument("--topic", action="append", default=[], help="repeatable; default: every topic")
    d.set_defaults(func=lambda a: _run(a, _topics_describe))
    rm = ts.add_parser("delete", help="delete topics")
    _common(rm)
    rm.add_argument("--topic", action="append", required=True, help="repeatable")
    rm.set_defaults(func=lambda a: _run(a, _topics_delete))
    ac = ts.add_parser(
        "alter-config", help="set or delete topic configs (or cluster defaults with --cluster)"
    )
    _common(ac)
    target = ac.add_mutually_exclusive_group(required=True)
    target.add_argument("--topic")
    target.add_argument("--cluster", action="store_true", help="change the cluster-wide defaults")
    ac.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ac.add_argument("--delete", action="append", default=[], metavar="KEY")
    ac.add_argument("--validate-only", action="store_true")
    ac.set_defaults(func=lambda a: _run(a, _topics_alter_config))
    dc = ts.add_parser("describe-config", help="effective configs of a topic (or the cluster defaults)")
    _common(dc)
    which = dc.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic")
    which.add_argument("--cluster", action="store_true", help="the cluster-wide defaults")
    dc.set_defaults(func=lambda a: _run(a, _topics_describe_config))
    el = ts.add_parser(
        "elect-leaders", help="preferred or unclean leader election (like kafka-leader-election.sh)"
    )
    _common(el)
    el.add_argument("--election", choices=["preferred", "unclean"], default="preferred")
    el.add_argument("--topic", help="default: every partition of every topic")
    el.add_argument("--partition", type=int, action="append", default=[], help="repeatable; needs --topic")
    el.set_defaults(func=lambda a: _run(a, _topics_elect_leaders))
    ap = ts.add_parser("add-partitions", help="grow a topic to --partitions partitions")
    _common(ap)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True, help="the new total number of partitions")
    ap.set_defaults(func=lambda a: _run(a, _topics_add_partitions))


# ---- running ---------------------------------------------------------------------------------


def _fail(error: errors.KafkaError | str) -> int:
    if isinstance(error, errors.KafkaError):
        name = errors.ErrorCode(error.code).name
        print(f"Error: {name} ({error.code}): {error.message}", file=sys.stderr)
    else:
        print(f"Error: {error}", file=sys.stderr)
    return EXIT_ERROR


def _run(args: argparse.Namespace, action: Callable[[Any, argparse.Namespace], int]) -> int:
    if not args.bootstrap:
        print("Error: give --bootstrap HOST:PORT (or set PYKRAFT_BOOTSTRAP)", file=sys.stderr)
        return EXIT_USAGE
    from pykraft.admin import AdminClient

    try:
        with AdminClient(args.bootstrap, timeout_s=args.timeout) as admin:
            return action(admin, args)
    except errors.KafkaError as exc:
        return _fail(exc)
    except UsageError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _print_json(value: Any) -> None:
    def default(o: Any) -> Any:
        if isinstance(o, errors.KafkaError):
            return {"code": errors.ErrorCode(o.code).name, "message": o.message}
        return str(o)

    print(json.dumps(_plain(value), default=default, indent=2, sort_keys=True))


def _plain(o: Any) -> Any:
    """Dataclasses and NamedTuples (``proto.kafka_types.TopicPartition``) as JSON objects, by field."""
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return {f.name: _plain(getattr(o, f.name)) for f in dataclasses.fields(o)}
    if isinstance(o, tuple) and hasattr(o, "_asdict"):
        return {k: _plain(v) for k, v in o._asdict().items()}
    if isinstance(o, (list, tuple)):
        return [_plain(v) for v in o]
    if isinstance(o, dict):
        return {k: _plain(v) for k, v in o.items()}
    return o


def _key_values(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE, e.g. retention.ms=60000")
        out[key.strip()] = value.strip()
    return out


def _assignment(text: str | None) -> dict[int, list[int]]:
    if not text:
        return {}
    try:
        return {p: [int(b) for b in part.split(":")] for p, part in enumerate(text.split(","))}
    except ValueError:
        raise UsageError(f"--replica-assignment {text!r}: expected broker ids like 1:2:3,2:3:1") from None


def _error_json(error: errors.KafkaError | None) -> dict[str, Any] | None:
    return None if error is None else {"code": errors.ErrorCode(error.code).name, "message": error.message}


# ---- topics ----------------------------------------------------------------------------------


def _topics_create(admin: Any, args: argparse.Namespace) -> int:
    assignment = _assignment(args.replica_assignment)
    if assignment and (args.partitions != -1 or args.replication_factor != -1):
        raise UsageError(
            "--replica-assignment replaces --partitions and --replication-factor; give one or the other"
        )
    spec = {
        "name": args.topic,
        "num_partitions": args.partitions,
        "replication_factor": args.replication_factor,
        "configs": _key_values(args.config, "--config"),
        "assignments": assignment,
    }
    (result,) = admin.create_topics([spec], validate_only=args.validate_only)
    exists = result.error is not None and result.error.code == errors.ErrorCode.TOPIC_ALREADY_EXISTS
    if args.json:
        _print_json(
            {
                "name": result.name,
                "topic_id": result.topic_id,
                "error": _error_json(result.error),
                "num_partitions": result.num_partitions,
                "replication_factor": result.replication_factor,
            }
        )
    if result.error is not None and not (exists and args.if_not_exists):
        return _fail(result.error)
    if not args.json:
        if exists:
            print(f"Topic {args.topic} already exists.")
        else:
            verb = "Validated" if args.validate_only else "Created"
            print(f"{verb} topic {result.name}.")
    if not exists:
        min_insync = spec["configs"].get(MIN_INSYNC_REPLICAS) or result.configs.get(MIN_INSYNC_REPLICAS)
        _note_min_insync_replicas(result.name, min_insync, result.replication_factor)
    return 0


def _topics_list(admin: Any, args: argparse.Namespace) -> int:
    topics = admin.list_topics()
    if args.json:
        _print_json(topics)
    else:
        for t in topics:
            print(t.name)
    return 0


def _topics_describe(admin: Any, args: argparse.Namespace) -> int:
    topics = admin.describe_topics(args.topic)
    failed = [t for t in topics if t.error is not None]
    if args.json:
        _print_json(
            [
                {**dataclasses.asdict(dataclasses.replace(t, error=None)), "error": _error_json(t.error)}
                for t in topics
            ]
        )
    else:
        for t in topics:
            if t.error is None:
                _print_topic(t)
    for t in failed:
        _fail(t.error)
    return EXIT_ERROR if failed else 0


def _ids(values: tuple[int, ...]) -> str:
    return ",".join(str(v) for v in values)


def _print_topic(t: Any) -> None:
    rf = len(t.partitions[0].replicas) if t.partitions else 0
    configs = ",".join(f"{k}={v}" for k, v in sorted(t.configs.items()))
    print(
        f"Topic: {t.name}\tTopicId: {t.topic_id}\tPartitionCount: {len(t.partitions)}\t"
        f"ReplicationFactor: {rf}\tConfigs: {configs}"
    )
    for p in t.partitions:
        leader = "none" if p.leader == -1 else p.leader
        offline = f"\tOffline: {_ids(p.offline_replicas)}" if p.offline_replicas else ""
        print(
            f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {leader}\tReplicas: {_ids(p.replicas)}\t"
            f"Isr: {_ids(p.isr)}\tLeaderEpoch: {p.leader_epoch}{offline}"
        )


def _item_results(results: list[Any], args: argparse.Namespace, done: str) -> int:
    if args.json:
        _print_json([{"name": r.name, "error": _error_json(r.error)} for r in results])
    failed = [r for r in results if r.error is not None]
    for r in results:
        if r.error is None and not args.json:
            print(done.format(name=r.name))
    for r in failed:
        _fail(r.error)
    return EXIT_ERROR if failed else 0


def _topics_delete(admin: Any, args: argparse.Namespace) -> int:
    return _item_results(admin.delete_topics(args.topic), args, "Deleted topic {name}.")


def _topics_add_partitions(admin: Any, args: argparse.Namespace) -> int:
    results = admin.create_partitions({args.topic: args.partitions})
    return _item_results(results, args, f"Topic {{name}} now has {args.partitions} partitions.")


def _topics_alter_config(admin: Any, args: argparse.Namespace) -> int:
    changes = [(k, "set", v) for k, v in _key_values(args.set, "--set").items()]
    changes += [(k, "delete", "") for k in args.delete]
    if not changes:
        raise UsageError("nothing to change: give --set KEY=VALUE and/or --delete KEY")
    kind, name = ("cluster", "") if args.cluster else ("topic", args.topic)
    admin.alter_configs(kind, name, changes, validate_only=args.validate_only)
    what = "the cluster defaults" if args.cluster else f"topic {args.topic}"
    if args.json:
        _print_json({"resource": what, "changes": changes, "validate_only": args.validate_only})
    else:
        print(f"{'Validated' if args.validate_only else 'Altered'} configs of {what}.")
    min_insync = {k: v for k, op, v in changes if op == "set"}.get(MIN_INSYNC_REPLICAS)
    if min_insync is not None and not args.cluster:
        (described,) = admin.describe_topics([args.topic])
        replication_factor = len(described.partitions[0].replicas) if described.partitions else 0
        _note_min_insync_replicas(args.topic, min_insync, replication_factor)
    return 0


MIN_INSYNC_REPLICAS = "min.insync.replicas"


def _note_min_insync_replicas(topic: str, value: str | None, replication_factor: int) -> None:
    """Say on stderr when min.insync.replicas exceeds the replication factor: the brokers then use the
    replication factor (Kafka's effectiveMinIsr), so acks=all needs every replica in the ISR."""
    if value is None or not value.isdigit() or replication_factor <= 0 or int(value) <= replication_factor:
        return
    print(
        f"Note: topic {topic} has min.insync.replicas={value}, more than its replication factor "
        f"{replication_factor}: the brokers use {replication_factor} (as Kafka does), so acks=all needs "
        f"all {replication_factor} replicas in the ISR.",
        file=sys.stderr,
    )


def _topics_describe_config(admin: Any, args: argparse.Namespace) -> int:
    kind, name = ("cluster", "") if args.cluster else ("topic", args.topic)
    entries = admin.describe_configs(kind, name)
    if args.json:
        _print_json(entries)
    else:
        _table([["Name", "Value", "Source"], *[[e.name, e.value, e.source] for e in entries]])
    return 0


def _topics_elect_leaders(admin: Any, args: argparse.Namespace) -> int:
    if args.partition and not args.topic:
        raise UsageError("--partition needs --topic")
    partitions = None
    if args.topic:
        wanted = args.partition or [
            p.partition for t in admin.describe_topics([args.topic]) for p in t.partitions
        ]
        partitions = [(args.topic, p) for p in wanted]
    results = admin.elect_leaders(args.election, partitions)
    if args.json:
        _print_json(
            [
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "leader": r.leader,
                    "error": _error_json(r.error),
                }
                for r in results
            ]
        )
    not_needed = errors.ErrorCode.ELECTION_NOT_NEEDED
    failed = [r for r in results if r.error is not None and r.error.code != not_needed]
    if not args.json:
        for r in results:
            if r.error is None:
                print(f"Elected broker {r.leader} for {r.topic}-{r.partition}.")
            elif r.error.code == not_needed:
                print(f"No election needed for {r.topic}-{r.partition} (leader {r.leader}).")
    for r in failed:
        print(f"{r.topic}-{r.partition}: ", end="", file=sys.stderr)
        _fail(r.error)
    return EXIT_ERROR if failed else 0


# ---- quorum, cluster -------------------------------------------------------------------------


def _table(rows: list[list[Any]]) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


def _quorum_describe(admin: Any, args: argparse.Namespace) -> int:
    q = admin.describe_quorum()
    if args.json:
        _print_json(q)
        return 0
    lag = max((v.lag for v in q.voters), default=0)
    print(
        f"LeaderId:       {q.leader_id}\nLeaderEpoch:    {q.leader_epoch}\nHighWatermark:  {q.high_watermark}"
    )
    print(f"MaxFollowerLag: {lag}\nCurrentVoters:  [{_ids(tuple(v.node_id for v in q.voters))}]\n")
    _table(
        [
            ["NodeId", "LogEndOffset", "Lag", "Status"],
            *[[v.node_id, v.log_end_offset, v.lag, v.status] for v in q.voters],
        ]
    )
    return 0


def _cluster_describe(admin: Any, args: argparse.Namespace) -> int:
    c = admin.describe_cluster()
    if args.json:
        _print_json(c)
        return 0
    print(f"ClusterId:        {c.cluster_id or '-'}")
    print(f"ActiveController: {c.controller_id}\nMetadataOffset:   {c.metadata_offset}")
    print("Controllers:      " + ", ".join(f"{i}@{h}:{p}" for i, h, p in c.controllers) + "\n")
    rows = [["BrokerId", "Rack", "State", "Epoch", "Endpoints"]]
    for b in c.brokers:
        state = "fenced" if b.fenced else ("shutting-down" if b.in_controlled_shutdown else "active")
        endpoints = ",".join(f"{n}://{h}:{p}" for n, h, p in b.endpoints)
        rows.append([b.broker_id, b.rack or "-", state, b.broker_epoch, endpoints])
    _table(rows)
    return 0
