"""``pykraft groups ...``: consumer groups, like Kafka's ``kafka-consumer-groups.sh``.

    pykraft groups list [--state Stable]
    pykraft groups describe GROUP [--members | --state]
    pykraft groups reset-offsets GROUP (--topic T[:P,P...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --to-datetime 2026-11-23T18:00:00.000 | --shift-by N)
        [--execute]
    pykraft groups delete GROUP [GROUP ...]

``describe`` prints, per partition, the committed offset (CURRENT-OFFSET), the high watermark
(LOG-END-OFFSET: what a consumer can read, as Kafka's tool shows for read_committed) and the LAG
between them, with the member that owns the partition. ``reset-offsets`` works only on an inactive
group (no members: Kafka's rule, and the coordinator enforces it too); it prints the plan and changes
nothing unless ``--execute`` is given (Kafka's dry-run default). New offsets are clamped into
``[log start offset, high watermark]`` as Kafka's tool does.

``--bootstrap`` (default ``$KAFKA_BOOTSTRAP``) lists brokers' Kafka listeners: the calls are Kafka's
Admin API on confluent-kafka (ListGroups, DescribeGroups, OffsetFetch, OffsetCommit, DeleteGroups,
and ListOffsets for the high watermarks). Output is a table, or JSON with ``--json``. Errors print
``Error: <CODE_NAME> (<code>): <message>`` and exit 1; bad flags exit 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from proto import errors
from proto.kafka_types import TopicPartition
from pykraft.cli_admin import EXIT_ERROR, EXIT_USAGE, UsageError, _fail, _print_json, _table
from pykraft.cli_kafka import (
    BOOTSTRAP_MISSING,
    BootstrapError,
    ClientError,
    ConsumerGroupDescription,
    KafkaGroupAdmin,
    add_bootstrap,
    check_bootstrap,
    tp_key,
)

NONE_SHOWN = "-"


def add_parser(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser("groups", help="consumer groups: list, describe, reset offsets, delete")
    gs = g.add_subparsers(dest="action", required=True, metavar="ACTION")
    lst = gs.add_parser("list", help="every consumer group of the cluster")
    _common(lst)
    lst.add_argument("--state", action="append", default=[], help="only groups in this state (repeatable)")
    lst.set_defaults(func=lambda a: _run(a, _list))
    d = gs.add_parser("describe", help="committed offset, high watermark and lag per partition; members")
    _common(d)
    _group_argument(d)
    view = d.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="members and their assignments")
    view.add_argument("--state", action="store_true", help="state, assignor, coordinator, member count")
    d.set_defaults(func=lambda a: _run(a, _describe))
    r = gs.add_parser("reset-offsets", help="move an inactive group's committed offsets")
    _common(r)
    _group_argument(r)
    scope = r.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]")
    scope.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for")
    spec = r.add_mutually_exclusive_group(required=True)
    spec.add_argument("--to-earliest", action="store_true")
    spec.add_argument("--to-latest", action="store_true", help="the high watermark")
    spec.add_argument("--to-offset", type=int, metavar="OFFSET")
    spec.add_argument(
        "--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss", help="UTC unless the time has an offset"
    )
    spec.add_argument("--shift-by", type=int, metavar="N", help="committed offset + N (N may be negative)")
    r.add_argument("--execute", action="store_true", help="commit the new offsets (default: dry run)")
    r.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    r.set_defaults(func=lambda a: _run(a, _reset_offsets))
    rm = gs.add_parser("delete", help="delete inactive groups and their committed offsets")
    _common(rm)
    rm.add_argument("groups", nargs="*", metavar="GROUP")
    rm.add_argument("--group", action="append", default=[], dest="group_flags", help="repeatable")
    rm.set_defaults(func=lambda a: _run(a, _delete))


def _common(p: argparse.ArgumentParser) -> None:
    add_bootstrap(p)
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each answer (default 30)")


def _run(args: argparse.Namespace, action: Callable[[Any, argparse.Namespace], int]) -> int:
    if not args.bootstrap:
        print(f"Error: {BOOTSTRAP_MISSING}", file=sys.stderr)
        return EXIT_USAGE
    try:
        check_bootstrap(args.bootstrap)
        with KafkaGroupAdmin(args.bootstrap, args.timeout, args.client_log_level) as admin:
            return action(admin, args)
    except errors.KafkaError as exc:
        return _fail(exc)
    except (ClientError, BootstrapError) as exc:
        return _fail(str(exc))
    except (UsageError, ValueError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _group_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("group", nargs="?", metavar="GROUP")
    p.add_argument("--group", dest="group_flag", help="the group id (or give it as GROUP)")


def _group_of(args: argparse.Namespace) -> str:
    group = args.group or args.group_flag
    if not group:
        raise UsageError("give the group id: GROUP or --group GROUP")
    return group


def _list(admin: Any, args: argparse.Namespace) -> int:
    groups = admin.list_consumer_groups(args.state)
    if args.json:
        _print_json(groups)
    elif args.state:
        _table([["GROUP", "STATE"], *[[g.group_id, g.state] for g in groups]])
    else:
        for g in groups:
            print(g.group_id)
    return 0


def _describe(admin: Any, args: argparse.Namespace) -> int:
    group = _group_of(args)
    description = admin.describe_consumer_group(group)
    if description.state == "Dead":
        print(f"Error: Consumer group '{group}' does not exist.", file=sys.stderr)
        return EXIT_ERROR
    if args.state:
        return _describe_state(description, args)
    if args.members:
        return _describe_members(description, args)
    rows = _offset_rows(admin, description)
    if args.json:
        _print_json({"group": group, "state": description.state, "partitions": rows})
        return 0
    if description.state == "Empty":
        print(f"Consumer group '{group}' has no active members.\n")
    elif description.state != "Stable":
        print(f"Warning: Consumer group '{group}' is rebalancing ({description.state}).\n")
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
              "CLIENT-ID"]
    _table([header, *[[group, *(_shown(r[k]) for k in header[1:])] for r in rows]])
    return 0


def _offset_rows(admin: Any, description: ConsumerGroupDescription) -> list[dict[str, Any]]:
    """One row per partition that is committed or assigned (Kafka's tool shows both)."""
    committed = admin.list_consumer_group_offsets(description.group_id)
    owner = {tp: m for m in description.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owner), key=tp_key)
    ends = admin.list_offsets(partitions, "latest") if partitions else {}
    rows = []
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp)
        member = owner.get(tp)
        rows.append({
            "TOPIC": tp.topic,
            "PARTITION": tp.partition,
            "CURRENT-OFFSET": current,
            "LOG-END-OFFSET": end,
            "LAG": end - current if end is not None and current is not None else None,
            "CONSUMER-ID": member.member_id if member else None,
            "HOST": member.client_host if member else None,
            "CLIENT-ID": member.client_id if member else None,
        })
    return rows


def _shown(value: Any) -> Any:
    return NONE_SHOWN if value is None or value == "" else value


def _described(error: errors.KafkaError | ClientError) -> str:
    if isinstance(error, errors.KafkaError):
        return f"{errors.ErrorCode(error.code).name} ({error.code}): {error.message}"
    return str(error)


def _describe_members(description: ConsumerGroupDescription, args: argparse.Namespace) -> int:
    if args.json:
        _print_json(description.members)
        return 0
    header = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
    rows = [
        [
            description.group_id, m.member_id, _shown(m.group_instance_id), _shown(m.client_host),
            _shown(m.client_id), len(m.assignment),
            ",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment) or NONE_SHOWN,
        ]
        for m in description.members
    ]
    _table([header, *rows])
    return 0


def _describe_state(description: ConsumerGroupDescription, args: argparse.Namespace) -> int:
    if args.json:
        _print_json(description)
        return 0
    _table([
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
        [description.group_id, description.coordinator, _shown(description.assignor), description.state,
         len(description.members)],
    ])
    return 0


def _reset_offsets(admin: Any, args: argparse.Namespace) -> int:
    group = _group_of(args)
    if args.execute and args.dry_run:
        raise UsageError("give --execute or --dry-run, not both")
    description = admin.describe_consumer_group(group)
    if description.is_active:
        print(
            f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current "
            f"state is {description.state}. Stop its consumers first.",
            file=sys.stderr,
        )
        return EXIT_ERROR
    committed = admin.list_consumer_group_offsets(group)
    partitions = _scope(admin, args, committed)
    plan = _plan(admin, args, partitions, committed)
    if args.execute:
        admin.alter_consumer_group_offsets(group, plan)
    ordered = [(tp, plan[tp]) for tp in sorted(plan, key=tp_key)]
    if args.json:
        offsets = [{"topic": tp.topic, "partition": tp.partition, "offset": o} for tp, o in ordered]
        _print_json({"group": group, "executed": args.execute, "offsets": offsets})
        return 0
    rows = [[group, tp.topic, tp.partition, o] for tp, o in ordered]
    _table([["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], *rows])
    if not args.execute:
        print("\nDry run: nothing was changed. Add --execute to commit these offsets.", file=sys.stderr)
    return 0


def _scope(
    admin: Any, args: argparse.Namespace, committed: dict[TopicPartition, Any]
) -> list[TopicPartition]:
    if args.all_topics:
        if not committed:
            raise UsageError("the group has no committed offsets: name the topics with --topic")
        return sorted(committed, key=tp_key)
    out: list[TopicPartition] = []
    for item in args.topic:
        topic, _, plist = item.partition(":")
        if plist:
            try:
                out += [TopicPartition(topic, int(p)) for p in plist.split(",")]
            except ValueError:
                raise UsageError(f"--topic {item!r}: partitions must be integers, as TOPIC:0,1,2") from None
            continue
        (description,) = admin.describe_topics([topic])
        if description.error is not None:
            raise description.error
        out += [TopicPartition(topic, p) for p in description.partitions]
    return sorted(set(out), key=tp_key)


def _plan(
    admin: Any,
    args: argparse.Namespace,
    partitions: list[TopicPartition],
    committed: dict[TopicPartition, Any],
) -> dict[TopicPartition, int]:
    earliest = admin.list_offsets(partitions, "earliest")
    latest = admin.list_offsets(partitions, "latest")
    if args.to_earliest:
        wanted = earliest
    elif args.to_latest:
        wanted = latest
    elif args.to_offset is not None:
        wanted = dict.fromkeys(partitions, args.to_offset)
    elif args.to_datetime is not None:
        wanted = admin.list_offsets(partitions, _parse_datetime_ms(args.to_datetime))
    else:
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            raise UsageError(f"--shift-by needs a committed offset; none for {_names(missing)}")
        wanted = {tp: committed[tp] + args.shift_by for tp in partitions}
    return {tp: min(max(wanted[tp], earliest[tp]), latest[tp]) for tp in partitions}


def _names(tps: list[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in tps)


def _parse_datetime_ms(text: str) -> int:
    """Kafka's ``YYYY-MM-DDTHH:mm:SS.sss`` (UTC), or any ISO-8601 time with an offset."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--to-datetime {text!r} is not a time like 2026-11-23T18:00:00.000") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _delete(admin: Any, args: argparse.Namespace) -> int:
    groups = [*args.groups, *args.group_flags]
    if not groups:
        raise UsageError("name the groups to delete: GROUP [GROUP ...] or --group GROUP")
    results = admin.delete_consumer_groups(groups)
    failed = {g: e for g, e in results.items() if e is not None}
    if args.json:
        _print_json(results)
    else:
        ok = [g for g in groups if results.get(g) is None]
        if ok:
            names = ", ".join(f"'{g}'" for g in ok)
            print(f"Deletion of requested consumer groups ({names}) was successful.")
        for g, e in failed.items():
            print(f"Error: deleting group '{g}' failed: {_described(e)}", file=sys.stderr)
    return EXIT_ERROR if failed else 0
