"""The nemesis: a seeded schedule of faults, each injected, held, healed and logged to the history.

Fault kinds (``KINDS``); targets are chosen when the fault starts, from the cluster's state then:

| kind | fault | heal |
|---|---|---|
| ``kill-leader`` | SIGKILL the leader of a random partition | restart it |
| ``kill-controller`` | SIGKILL the active controller | restart it |
| ``kill-leader-and-controller`` | both at once | restart both |
| ``kill-coordinator`` | SIGKILL the broker coordinating the consumer group | restart it |
| ``kill-two-brokers`` | SIGKILL a leader and another broker at once (KIP-101's 2nd case) | restart both |
| ``pause-leader`` | SIGSTOP a partition leader longer than the session timeout | SIGCONT |
| ``pause-controller`` | SIGSTOP the active controller | SIGCONT |
| ``isolate-leader`` | partition a leader from every other node | heal |
| ``isolate-controller`` | partition the active controller from every other node | heal |
| ``leader-from-controllers`` | cut a leader off the controllers only (followers reach it) | heal |
| ``halves`` | split the six nodes into two random groups | heal |

Each fault is an op ``fault`` (when injected) and an op ``heal`` (when healed), both with
``{"kind", "nodes", "fault_s"}``. Kinds come in rounds (each once per round, in a seeded order).
The seed fixes the kinds, durations and random choices; the *targets* depend on who leads at
that moment, so two runs of a seed are alike, not identical.
After each heal the nemesis waits (bounded) until every node is healthy, then stays quiet a moment —
except with ``overlap``, where the next fault may hit a cluster still recovering from the last.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from proto.kafka import messages as m
from pykraft.admin import AdminClient
from tests.chaos.cluster import ChaosCluster
from tests.chaos.history import OK, History
from tests.chaos.workload import GROUP
from tests.kafka_call import kafka_call

KINDS = (
    "kill-leader",
    "kill-controller",
    "kill-leader-and-controller",
    "kill-two-brokers",
    "kill-coordinator",
    "pause-leader",
    "pause-controller",
    "isolate-leader",
    "isolate-controller",
    "leader-from-controllers",
    "halves",
)
FAULT_S = (3.0, 6.0)  # every fault lasts longer than broker.session.timeout.ms (2 s)
QUIET_S = (1.0, 3.0)
OVERLAP_QUIET_S = (0.0, 1.0)
RECOVER_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    nodes: tuple[str, ...]
    fault_s: float
    pairs: tuple[tuple[str, str], ...] = ()


KAFKA_CALL_TIMEOUT_S = 5.0


class Nemesis(threading.Thread):
    def __init__(self, cluster: ChaosCluster, history: History, topic: str, seed: int,
                 kinds: tuple[str, ...] = KINDS, overlap: bool = False) -> None:  # fmt: skip
        super().__init__(name="chaos-nemesis", daemon=True)
        self.cluster, self.history, self.topic = cluster, history, topic
        self.rng = random.Random(seed)
        self.kinds = kinds
        # overlap: the next fault does not wait for the cluster to recover (a restarted node may be
        # killed again while it recovers its logs), and the quiet time between faults is shorter.
        self.overlap = overlap
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.admin = AdminClient(cluster.cluster.controller_addresses, timeout_s=20.0)

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        try:
            order: list[str] = []
            while not self.stopping.wait(self.rng.uniform(*(OVERLAP_QUIET_S if self.overlap else QUIET_S))):
                order = order or self.rng.sample(self.kinds, len(self.kinds))  # each kind once per round
                kind = order.pop()
                try:
                    fault = self.plan(kind)
                except Exception:  # choosing a target asks the cluster, which earlier faults can still
                    order.append(kind)  # slow past the admin timeout: the same kind, after the next quiet
                    continue
                self.once(fault)
        except BaseException as exc:
            self.error = exc
        finally:
            self.admin.close()

    # ---- choosing targets ---------------------------------------------------------------------

    def leader(self) -> str:
        partitions = self.admin.describe_topics([self.topic])[0].partitions
        leaders = [p.leader for p in partitions if p.leader > 0]
        brokers = self.cluster.names("broker")
        return f"broker-{self.rng.choice(leaders)}" if leaders else self.rng.choice(brokers)

    def coordinator(self) -> str:
        """The group coordinator's broker (a partition leader when there is no group yet)."""
        # A raw FindCoordinator (v2) per broker, not librdkafka's AdminClient: dropping one while its
        # request waits on a dead broker trips an assertion in librdkafka 2.16
        # (rd_kafka_enq_once_del_source_return: eonce->refcnt > 0) and aborts the whole process.
        for address in self.cluster.kafka_bootstrap.split(","):
            try:
                answer = kafka_call(address, m.FindCoordinatorRequest(key=GROUP), 2, KAFKA_CALL_TIMEOUT_S)
            except OSError:
                continue
            if answer.error_code == 0:
                return f"broker-{answer.node_id}"
        return self.leader()

    def controller(self) -> str:
        leader = self.admin.describe_quorum().leader_id
        return f"controller-{leader}" if leader > 0 else self.rng.choice(self.cluster.names("controller"))

    def plan(self, kind: str) -> Fault:
        fault_s = self.rng.uniform(*FAULT_S)
        others = self.cluster.names()
        if kind in ("kill-leader", "pause-leader"):
            return Fault(kind, (self.leader(),), fault_s)
        if kind == "kill-coordinator":
            return Fault(kind, (self.coordinator(),), fault_s)
        if kind in ("kill-controller", "pause-controller"):
            return Fault(kind, (self.controller(),), fault_s)
        if kind == "kill-leader-and-controller":
            return Fault(kind, (self.leader(), self.controller()), fault_s)
        if kind == "kill-two-brokers":
            leader = self.leader()
            other = self.rng.choice([b for b in self.cluster.names("broker") if b != leader])
            return Fault(kind, (leader, other), fault_s)
        if kind in ("isolate-leader", "isolate-controller"):
            node = self.leader() if kind == "isolate-leader" else self.controller()
            return Fault(kind, (node,), fault_s, tuple((node, o) for o in others if o != node))
        if kind == "leader-from-controllers":
            node = self.leader()
            return Fault(kind, (node,), fault_s, tuple((node, c) for c in self.cluster.names("controller")))
        assert kind == "halves", f"unknown fault kind {kind!r}"
        shuffled = self.rng.sample(others, len(others))
        cut = self.rng.randint(2, len(others) - 2)
        side_a, side_b = shuffled[:cut], shuffled[cut:]
        return Fault(kind, tuple(side_a), fault_s, tuple((a, b) for a in side_a for b in side_b))

    # ---- injecting and healing ----------------------------------------------------------------

    def once(self, fault: Fault) -> None:
        value = {"kind": fault.kind, "nodes": list(fault.nodes), "fault_s": round(fault.fault_s, 2)}
        start = self.history.now()
        apply(self.cluster, fault)
        self.history.add("nemesis", "fault", OK, start, value)
        time.sleep(fault.fault_s)  # a stop request ends the schedule after this fault, not during it
        start = self.history.now()
        heal(self.cluster, fault, self.rng)
        self.history.add("nemesis", "heal", OK, start, value)
        if not self.overlap:
            wait_recovered(self.cluster, self.stopping.is_set)


def apply(cluster: ChaosCluster, fault: Fault) -> None:
    if fault.pairs:
        cluster.proxy.block(list(fault.pairs))
    elif fault.kind.startswith("kill"):
        for name in fault.nodes:
            cluster.kill(name)
    else:
        assert fault.kind.startswith("pause"), fault
        for name in fault.nodes:
            cluster.pause(name)


def heal(cluster: ChaosCluster, fault: Fault, rng: random.Random) -> None:
    if fault.pairs:
        cluster.proxy.heal()
    elif fault.kind.startswith("kill"):
        for name in rng.sample(fault.nodes, len(fault.nodes)):  # the restart order, seeded
            cluster.restart(name)
    else:
        for name in fault.nodes:
            cluster.resume(name)


def heal_everything(cluster: ChaosCluster) -> None:
    cluster.proxy.heal()
    for name in cluster.names():
        cluster.resume(name)
        cluster.restart(name)


def wait_recovered(cluster: ChaosCluster, give_up: Callable[[], bool] = lambda: False,
                   timeout_s: float = RECOVER_TIMEOUT_S) -> bool:  # fmt: skip
    """Until every node answers its health check (False after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cluster.all_healthy():
            return True
        if give_up():
            return False
        time.sleep(0.2)
    return False


# ---- the negative control: a schedule that forces an unclean leader election ----------------------

STEP_TIMEOUT_S = 60.0


def force_unclean_election(cluster: ChaosCluster, history: History, topic: str,
                           acked: Callable[[], int]) -> None:  # fmt: skip
    """Make an out-of-sync replica the only live one of partition 0, so that it leads uncleanly.

    1. SIGKILL a follower F; wait until the ISR is the other two (F is out of sync from then on).
    2. Wait for writes acknowledged by that ISR: F lacks them.
    3. SIGKILL both ISR members, restart F: with ``unclean.leader.election.enable=true`` the
       controller makes F the leader (ISR = {F}); without it the partition would stay offline.
    4. Restart the other two: they truncate their logs to F's by leader epoch. The writes of step 2
       were acknowledged and are gone — the checker must say so.
    """
    info = cluster.describe(topic, 0)
    follower = f"broker-{next(r for r in info.replicas if r != info.leader)}"
    in_sync = [f"broker-{r}" for r in info.replicas if f"broker-{r}" != follower]
    _step(history, "kill-follower", [follower], lambda: cluster.kill(follower))
    cluster.wait_isr(topic, {int(n.split("-")[1]) for n in in_sync}, timeout_s=STEP_TIMEOUT_S)
    _wait_acked(acked, 30, "writes acknowledged without the follower")
    _step(history, "kill-isr", in_sync, lambda: [cluster.kill(n) for n in in_sync])
    _step(history, "restart-out-of-sync", [follower], lambda: cluster.restart(follower))
    _wait(lambda: cluster.describe(topic, 0).leader == int(follower.split("-")[1]),
          f"{follower} to lead uncleanly")  # fmt: skip
    _step(history, "restart-isr", in_sync, lambda: [cluster.restart(n) for n in in_sync])


def _step(history: History, kind: str, nodes: list[str], action: Callable[[], object]) -> None:
    start = history.now()
    action()
    history.add("nemesis", "fault", OK, start, {"kind": kind, "nodes": nodes, "fault_s": 0.0})


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"negative control: timed out waiting for {what}"
        time.sleep(0.1)


def _wait_acked(acked: Callable[[], int], more: int, what: str) -> None:
    """Until ``more`` writes more are acknowledged; fails only after STEP_TIMEOUT_S without any new
    one. Progress, not speed, is the point: on a loaded machine a control whose every batch is
    written twice (acks=all both times) gets its acknowledgements several times slower."""
    target, last, deadline = acked() + more, -1, 0.0
    while (now := acked()) < target:
        if now != last:
            last, deadline = now, time.monotonic() + STEP_TIMEOUT_S
        assert time.monotonic() < deadline, (
            f"negative control: nothing acknowledged for {STEP_TIMEOUT_S:.0f} s: {what}"
        )
        time.sleep(0.1)


def no_faults(cluster: ChaosCluster, history: History, topic: str, acked: Callable[[], int]) -> None:
    """A schedule without faults: wait for some acknowledged writes (for client-side negative controls)."""
    _wait_acked(acked, 200, "200 acknowledged writes")


CUT_EVERY = 3


def cut_produce_answers(cluster: ChaosCluster, history: History, topic: str,
                        acked: Callable[[], int]) -> None:  # fmt: skip
    """Every third Produce answer to a client is cut (the proxy closes the connection instead of
    forwarding it) while 200 writes more are acknowledged: the client resends the batches it sent on
    that connection, which the broker had appended. A ``fault`` op records how many answers were cut."""
    start = history.now()
    cluster.proxy.cut_produce_answers(CUT_EVERY)
    try:
        _wait_acked(acked, 200, "200 acknowledged writes while Produce answers are cut")
    finally:
        cut = cluster.proxy.cut_produce_answers(0)
    value = {"kind": "cut-produce-answers", "nodes": cluster.names("broker"), "fault_s": 0.0, "cut": cut}
    history.add("nemesis", "fault", OK, start, value)
