"""A controller's Prometheus metrics: the quorum's and the cluster's health, read at scrape time.

- ``pykraft_controller_active``: 1 on the active controller (the Raft leader), else 0; summed over
  the controllers it is 1 when the quorum is healthy (Kafka's ``ActiveControllerCount``);
- ``pykraft_controller_offline_partitions``: partitions with no leader, as the active controller's
  image says (0 on the others, so the sum over controllers is the cluster's count);
- ``pykraft_controller_fenced_brokers`` / ``pykraft_controller_registered_brokers`` (active only);
- ``pykraft_raft_term``, ``pykraft_raft_commit_index``, ``pykraft_raft_last_index``: this voter's Raft
  state (the Raft paper's words, as in ``raft/``);
- ``pykraft_raft_voter_lag_entries`` (label ``voter``, on the leader only): the leader's last index
  minus each follower's match index.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from metadata.controller import QuorumController
from proto.kafka_types import NO_LEADER
from raft.driver import RaftDriver


class ControllerCollector(Collector):
    def __init__(self, driver: RaftDriver, controller: QuorumController) -> None:
        self.driver = driver
        self.controller = controller

    def collect(self) -> Iterable[Metric]:
        active = self.driver.is_leader
        image = self.controller.image
        offline = fenced = registered = 0
        if active:
            offline = sum(
                1
                for topic in image.topics.values()
                for p in topic.partitions.values()
                if p.leader == NO_LEADER
            )
            registered = len(image.brokers)
            fenced = sum(1 for b in image.brokers.values() if b.fenced)
        yield GaugeMetricFamily("pykraft_controller_active", "1 on the active controller", value=int(active))
        yield GaugeMetricFamily(
            "pykraft_controller_offline_partitions", "Partitions without a leader (active controller)",
            value=offline,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "pykraft_controller_registered_brokers",
            "Registered brokers (active controller)",
            value=registered,
        )
        yield GaugeMetricFamily(
            "pykraft_controller_fenced_brokers", "Fenced brokers (active controller)", value=fenced
        )
        yield GaugeMetricFamily("pykraft_raft_term", "Current Raft term", value=self.driver.term)
        yield GaugeMetricFamily(
            "pykraft_raft_commit_index", "Raft commit index", value=self.driver.commit_index
        )
        yield from self._leader_view(active)

    def _leader_view(self, active: bool) -> Iterable[Metric]:
        core = self.driver._core  # None before start(); read-only here
        if core is None:
            return
        yield GaugeMetricFamily(
            "pykraft_raft_last_index", "Last index of the local Raft log", value=core.last_index
        )
        lag = GaugeMetricFamily(
            "pykraft_raft_voter_lag_entries", "Leader's last index minus the voter's match index",
            labels=["voter"],
        )  # fmt: skip
        if active:
            for voter, progress in sorted(dict(core.progress).items()):
                lag.add_metric([str(voter)], max(0, core.last_index - progress.match_index))
        yield lag


def controller_registry(driver: RaftDriver, controller: QuorumController) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ControllerCollector(driver, controller))
    return registry
