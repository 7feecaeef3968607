"""The cluster's health (``laneway health``): brokers, controller, topics, under-replicated and
offline partitions.

    health = cluster_health(admin, bootstrap)
    if not health.ok:
        print("; ".join(health.problems))
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

__all__ = ["BrokerNode", "Health", "cluster_health"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerNode:
    id: int
    host: str
    port: int
    controller: bool


@dataclass(frozen=True)
class Health:
    bootstrap: str
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerNode, ...]
    topics: int
    partitions: int
    #: (topic, partition, replicas, in-sync replicas)
    under_replicated: tuple[tuple[str, int, int, int], ...]
    #: (topic, partition) without a leader
    offline: tuple[tuple[str, int], ...]

    @property
    def problems(self) -> list[str]:
        out = []
        if self.controller_id < 0:
            out.append("no active controller")
        if self.offline:
            out.append(f"{len(self.offline)} partition(s) without a leader")
        if self.under_replicated:
            out.append(f"{len(self.under_replicated)} under-replicated partition(s)")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems


def cluster_health(admin: AdminClient, bootstrap: str) -> Health:
    md = admin.list_topics(timeout=10)
    controller = md.controller_id
    try:
        desc = admin.describe_cluster(request_timeout=10).result(10)
        if desc.controller is not None:
            controller = desc.controller.id
    except KafkaException as exc:  # older brokers: fall back to metadata
        logger.debug("describe_cluster failed: %s", exc)
    brokers = tuple(
        BrokerNode(b.id, str(b.host), b.port, b.id == controller)
        for b in sorted(md.brokers.values(), key=lambda b: b.id)
    )
    under, offline, count = [], [], 0
    for name, t in sorted(md.topics.items()):
        for p in t.partitions.values():
            count += 1
            if p.leader < 0:
                offline.append((name, p.id))
            if len(p.isrs) < len(p.replicas):
                under.append((name, p.id, len(p.replicas), len(p.isrs)))
    return Health(
        bootstrap, md.cluster_id, controller, brokers, len(md.topics), count, tuple(under), tuple(offline)
    )
