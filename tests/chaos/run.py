"""Run the chaos harness: cluster + workload + nemesis, then heal, read everything back and check.

    .venv/bin/python -m tests.chaos.run --duration 600 --write-results   # the long run (~12 min)
    .venv/bin/python -m tests.chaos.run --duration 60 --seed 7            # a short one

Phases: start 3 controllers + 3 brokers behind the proxy (``tests.chaos.cluster``); create the
topic (RF=3, ``min.insync.replicas=2``); start producers, consumers and the admin
(``tests.chaos.workload``); run the nemesis (``tests.chaos.nemesis``) for ``--duration`` seconds while
the admin creates topics and adds a partition; heal everything, restart what is down and wait until
the cluster is whole; stop the writers; read every partition from its log start to its HW (the
*final read*); check the history (``tests.chaos.checker``) and print the table
(``tests.chaos.report``). ``--write-results`` puts the table into ``bench/RESULTS.md``'s
``## chaos`` section. Exit status 1 when an anomaly (or a harness problem) was found; the history
is kept as JSON lines (``--history``) for replaying the checker.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from proto import errors
from proto.errors import ErrorCode
from tests.chaos import report
from tests.chaos.checker import CheckResult, check
from tests.chaos.checker import report as anomaly_report
from tests.chaos.cluster import ChaosCluster, chaos_cluster
from tests.chaos.history import FAIL, OK, History, Op
from tests.chaos.nemesis import KINDS, Nemesis, heal_everything, wait_recovered
from tests.chaos.workload import (
    CLIENT_SETTINGS,
    AdminWorker,
    ConsumerWorker,
    GroupConsumerWorker,
    ProducerWorker,
    TopicState,
)
from tests.integration.broker.broker_cluster import wait_for

TOPIC = "chaos"
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "RESULTS.md"
FINAL_READ_TIMEOUT_S = 90.0
JOIN_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 60.0
MAX_DURATION_FACTOR = 2.5
TopicAlreadyExistsError = errors.exception_class(ErrorCode.TOPIC_ALREADY_EXISTS)
Schedule = Callable[[ChaosCluster, History, str, Callable[[], int]], None]


@dataclass
class RunConfig:
    duration_s: float = 90.0
    seed: int = 1
    producers: int = 3
    consumers: int = 2
    partitions: int = 3
    rate_per_s: float = 40.0  # per producer
    kinds: tuple[str, ...] = KINDS
    topic_configs: dict[str, str] = field(default_factory=lambda: {"min.insync.replicas": "2"})
    overrides: dict[str, str] = field(default_factory=dict)
    admin_ops: bool = True
    min_faults: int = 0
    producer_options: dict[str, object] = field(default_factory=dict)  # more librdkafka producer settings
    overlap: bool = False  # faults do not wait for the cluster to recover from the previous one
    groups: bool = True  # consumers in a group (subscribe + commit), or on assigned partitions
    schedule: Schedule | None = None  # a scripted nemesis instead of the seeded one


@dataclass
class RunResult:
    history: list[Op]
    check: CheckResult
    figures: dict
    problems: list[str]
    seconds: float

    def table(self, title: str) -> str:
        return report.table(self.figures, self.check, title)

    @property
    def ok(self) -> bool:
        return self.check.valid and not self.problems

    def explain(self) -> str:
        parts = [f"harness problem: {p}" for p in self.problems]
        if not self.check.valid:
            parts.append(anomaly_report(self.history, self.check))
        return "\n".join(parts)


def run_chaos(data_dir: Path, config: RunConfig, log: Callable[[str], None] = print) -> RunResult:
    started = time.monotonic()
    history = History()
    try:
        with chaos_cluster(data_dir, **config.overrides) as cluster:
            log(f"cluster up in {time.monotonic() - started:.0f} s; bootstrap {cluster.bootstrap}")
            problems = run_workload(cluster, history, config, log)
    finally:  # kept for a look at what happened, also when the harness itself failed
        history.write_jsonl(data_dir / "history.jsonl")
    ops = history.ops()
    return RunResult(ops, check(ops), report.figures(ops, TOPIC), problems, time.monotonic() - started)


def run_workload(cluster: ChaosCluster, history: History, config: RunConfig,
                 log: Callable[[str], None]) -> list[str]:  # fmt: skip
    """The workload under the nemesis, the heal, the final read; returns the harness problems."""
    problems: list[str] = []
    configs = {k.replace(".", "_"): v for k, v in config.topic_configs.items()}
    cluster.create_topic(TOPIC, partitions=config.partitions, **configs)
    check_proxy_sees_nodes(cluster)
    topic = TopicState(TOPIC, config.partitions)
    bootstrap = cluster.kafka_bootstrap
    producers = [ProducerWorker(i, history, bootstrap, topic, config.rate_per_s,
                                config.producer_options) for i in range(config.producers)]  # fmt: skip
    consumer_class = GroupConsumerWorker if config.groups else ConsumerWorker
    consumers = [consumer_class(i, history, bootstrap, topic) for i in range(config.consumers)]
    admin = AdminWorker(history, cluster.cluster.controller_addresses)
    workers = [*producers, *consumers, admin]
    for w in workers:
        w.start()
    try:
        acked = lambda: history.count("send")  # noqa: E731
        wait_for(lambda: acked() >= 10, 60, "the first acknowledged writes")
        log(f"workload running; faults for {config.duration_s:.0f} s")
        if config.schedule is not None:
            config.schedule(cluster, history, TOPIC, acked)
        else:
            run_nemesis(cluster, history, config, admin, topic, problems)
        heal_everything(cluster)
        if not wait_recovered(cluster):
            problems.append("the cluster did not become healthy within 60 s after the last heal")
        more = acked() + 20
        wait_for(lambda: acked() >= more, 60, "writes acknowledged after the heal")
        stop([*producers, admin])
        log("writers stopped; final read")
        problems += final_read(cluster, history, topic)
        if config.groups:  # at-least-once end to end: the group consumes every record
            problems += drain(history)
    finally:
        stop(workers)
    problems += [f"{w.process} failed: {w.error!r}" for w in workers if w.error is not None]
    problems += [f"{w.process} did not stop" for w in workers if w.is_alive()]
    return problems


def stop(workers: list) -> None:
    for w in workers:
        w.stop()
    for w in workers:
        w.join(JOIN_TIMEOUT_S)


def drain(history: History) -> list[str]:
    """Wait until the consumers polled every record of the final read (bounded)."""
    final = {(op.value["topic"], op.value["partition"], o) for op in history.ops() if op.f == "final-read"
             for o, _v in op.value["records"]}  # fmt: skip

    def missing() -> set:
        polled = {(t, p, o) for op in history.ops() if op.f == "poll" for t, p, o, _v in op.value["records"]}
        return final - polled

    try:
        wait_for(lambda: not missing(), DRAIN_TIMEOUT_S, "the consumer group to poll every record",
                 interval_s=1.0)  # fmt: skip
    except AssertionError:
        left = sorted(missing())
        return [(f"the consumers did not poll {len(left)} records of the final read within "
                f"{DRAIN_TIMEOUT_S:.0f} s (at-least-once), e.g. {left[:5]}")]  # fmt: skip
    return []


def check_proxy_sees_nodes(cluster: ChaosCluster) -> None:
    """Partitions work only if every node-to-node link crosses the proxy and is attributed to its node:
    controllers dial controllers, brokers dial controllers, followers dial leaders."""

    def attributed() -> bool:
        links = {tuple(n.split("-")[0] for n in k.split(">")) for k in cluster.proxy.connections()}
        return {("controller", "controller"), ("broker", "controller"), ("broker", "broker")} <= links

    try:
        wait_for(attributed, 30, "the proxy to attribute node-to-node connections")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it sees {cluster.proxy.connections()}") from None


def run_nemesis(cluster: ChaosCluster, history: History, config: RunConfig, admin: AdminWorker,
                topic: TopicState, problems: list[str]) -> None:  # fmt: skip
    nemesis = Nemesis(cluster, history, TOPIC, config.seed, config.kinds, config.overlap)
    nemesis.start()
    start = time.monotonic()
    admin_plan = [(0.3, "create-topic", 1), (0.5, "add-partitions", 0), (0.7, "create-topic", 2)]
    faults = lambda: history.count("fault")  # noqa: E731
    # At least one round of every kind (a loaded machine injects fewer per minute), within a bound.
    while (elapsed := time.monotonic() - start) < config.duration_s or (
        faults() < config.min_faults and elapsed < MAX_DURATION_FACTOR * config.duration_s
    ):
        if config.admin_ops and admin_plan and elapsed >= admin_plan[0][0] * config.duration_s:
            _, f, n = admin_plan.pop(0)
            submit_admin(admin, f, n, topic)
        time.sleep(0.2)
    nemesis.stop()
    nemesis.join(JOIN_TIMEOUT_S + 30)
    if nemesis.error is not None:
        problems.append(f"the nemesis failed: {nemesis.error!r}")
    if nemesis.is_alive():
        problems.append("the nemesis did not stop")


def submit_admin(admin: AdminWorker, f: str, n: int, topic: TopicState) -> None:
    if f == "create-topic":
        name = f"{TOPIC}-extra-{n}"

        def create(client) -> None:
            with contextlib.suppress(TopicAlreadyExistsError):  # an earlier attempt that timed out did it
                client.create_topic(name, num_partitions=1, replication_factor=3,
                                    configs={"min.insync.replicas": "2"})  # fmt: skip

        admin.submit(f, {"topic": name, "partitions": 1}, create)
        return
    count = topic.count() + 1

    def grow(client) -> None:
        if len(client.describe_topics([topic.name])[0].partitions) < count:  # not done by an earlier try
            (result,) = client.create_partitions({topic.name: count})
            if result.error is not None:
                raise result.error
        topic.grow(count)

    admin.submit(f, {"topic": topic.name, "partitions": count}, grow)


def final_read(cluster: ChaosCluster, history: History, topic: TopicState) -> list[str]:
    """Every partition from its log start to its HW; one ``final-read`` op per partition."""
    problems = []
    for partition in range(topic.count()):
        start = history.now()
        try:
            leader = cluster.leader(topic.name, partition, timeout_s=60)
            hw = cluster.high_watermark(leader, topic.name, partition)
            records = read_partition(cluster.kafka_bootstrap, topic.name, partition, hw)
        except Exception as exc:  # AssertionError from the waits included
            value = {"topic": topic.name, "partition": partition, "high_watermark": -1, "records": []}
            history.add("final", "final-read", FAIL, start, value, error=repr(exc))
            problems.append(f"final read of {topic.name}-{partition} failed: {exc!r}")
            continue
        value = {"topic": topic.name, "partition": partition, "high_watermark": hw, "records": records}
        history.add("final", "final-read", OK, start, value)
    return problems


def read_partition(bootstrap: str, topic: str, partition: int, high_watermark: int) -> list[list]:
    """``[offset, value]`` of every record of the partition below ``high_watermark`` (a deadline)."""
    records: list[list] = []
    deadline = time.monotonic() + FINAL_READ_TIMEOUT_S
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-final-read",  # assign only
                         "enable.auto.commit": False, **CLIENT_SETTINGS})  # fmt: skip
    try:
        tp = TopicPartition(topic, partition, OFFSET_BEGINNING)
        log_start, _ = consumer.get_watermark_offsets(tp, timeout=FINAL_READ_TIMEOUT_S)
        position = log_start
        consumer.assign([tp])
        while position < high_watermark:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{topic}-{partition}: read up to {position} of HW {high_watermark} "
                    f"in {FINAL_READ_TIMEOUT_S} s"
                )
            for m in consumer.consume(5000, 0.5):
                if m.error() is None:
                    records.append([m.offset(), (m.value() or b"").decode()])
                    position = m.offset() + 1
    finally:
        consumer.close()
    return [r for r in records if r[0] < high_watermark]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=90.0, help="seconds of faults (default 90)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a temporary directory")
    parser.add_argument("--history", type=Path, default=None, help="write the history here (JSON lines)")
    parser.add_argument("--write-results", action="store_true", help="write the table to bench/RESULTS.md")
    parser.add_argument("--overlap", action="store_true",
                        help="do not wait for the cluster to recover between faults (harsher)")
    parser.add_argument("--groups", action=argparse.BooleanOptionalAction, default=RunConfig.groups,
                        help="consumers in a group (subscribe, commit) or on assigned partitions")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
        data_dir = args.data_dir or Path(tmp)
        config = RunConfig(duration_s=args.duration, seed=args.seed, groups=args.groups, overlap=args.overlap)
        result = run_chaos(data_dir, config)
    if args.history:
        args.history.write_text("".join(op.to_json() + "\n" for op in result.history))
    consumers = "group consumers (subscribe, commit)" if args.groups else "assigned consumers"
    overlap = ", overlapping" if args.overlap else ""
    title = (f"{args.duration:.0f} s of faults{overlap}, seed {args.seed}, {consumers} "
             f"({result.seconds:.0f} s in all)")  # fmt: skip
    body = result.table(title)
    for op in result.history:  # the fault log, with timestamps (seconds since the run started)
        if op.process == "nemesis":
            print(f"{op.start_s:8.2f} s  {op.f:5}  {op.value['kind']:28} {' '.join(op.value['nodes'])}")
    print(body)
    if not result.ok:
        print(result.explain(), file=sys.stderr)
    if args.write_results:
        groups = "--groups" if args.groups else "--no-groups"
        command = f"--duration {args.duration:.0f} --seed {args.seed} {groups} --write-results"
        command += " --overlap" if args.overlap else ""
        note = (f"Run with `.venv/bin/python -m tests.chaos.run {command}` on a shared 2-core machine "
                f"({platform.python_version()}). What each row means: docs/chaos.md.\n\n")  # fmt: skip
        failed = "" if result.ok else "\n**FAILED**:\n\n```\n" + result.explain()[:3000] + "\n```\n"
        report.write_section(RESULTS, note + body + failed)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
