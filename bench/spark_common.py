"""What the Spark benchmark's commands share (``bench.spark_bench`` describes the benchmark).

The contenders' names, the ``catalog.entities``-shaped topic they read (``produce_entities``)
and what a backlog run knows of it (``_backlog_spec``), and the ``--bootstrap`` of the Spark
commands' command lines (``cli``, ``parse``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from typing import Any

#: the pipeline's recommended processing-time trigger, for both contenders (see laneway.spark.settings)
LIVE_TRIGGER = "10 seconds"
ENTITY_TYPES = ("database", "table", "column", "owner", "lineage")
#: the root of another checkout whose pipeline runs as the ``merge-before`` contender
BASELINE_ENV = "LANEWAY_BENCH_SPARK_BASELINE"


#: the plain appends: Spark's Kafka source at its defaults, and with the pipeline's source options
APPENDS = ("append", "append-tuned")
#: the lower bound of a pipeline keeping the three tables (``bench.spark_bench``'s docstring;
#: ``sweep --floor``)
FLOOR = "floor"
#: the pipeline with ``deletion_vectors=True`` (``sweep --deletion-vectors``): each batch small
#: against ``entities`` MERGEs with deletion vectors, a larger one rewrites
MERGE_DV = "merge-dv"


def contenders() -> list[str]:
    merges = ["merge", "merge-before"] if os.environ.get(BASELINE_ENV) else ["merge"]
    return [*merges, *APPENDS]


def _backlog_spec(
    bootstrap: str, topic: str, records: int, versions: dict[str, int], per_trigger: int
) -> dict[str, Any]:
    """What a backlog run needs to know of its pre-produced topic, and what its checks compare."""
    return {
        "bootstrap": bootstrap,
        "topic": topic,
        "records": records,
        "entities": len(versions),
        "version_sum": sum(versions.values()),
        "max_offsets_per_trigger": per_trigger,
        "produced_end_ms": time.time() * 1000,
    }


def produce_entities(
    bootstrap: str,
    topic: str,
    n: int,
    entities: int,
    *,
    rate: float | None = None,
    seed: int = 5,
    versions: dict[str, int] | None = None,
) -> dict[str, int]:
    """``n`` catalog.entities records over ``entities`` ids (at ``rate``/s if given, stamped with
    their produce time as ``event_time_ms``); returns each id's last version. ``versions``:
    each id's last version so far (updated in place), to go on from an earlier call."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    rng = random.Random(seed)
    versions = {} if versions is None else versions
    t0 = time.monotonic()
    for k in range(n):
        if rate is not None:
            # poll returns early on any delivery report: wait until the record's due time
            while (wait := t0 + k / rate - time.monotonic()) > 0:
                p.poll(wait)
        i = rng.randrange(entities)
        eid = f"e{i}"
        v = versions[eid] = versions.get(eid, 0) + 1
        etype = ENTITY_TYPES[i % len(ENTITY_TYPES)]
        now_ms = int(time.time() * 1000)
        rec: dict[str, Any] = {
            "entity_id": eid,
            "entity_type": etype,
            "op": "create" if v == 1 else ("delete" if rng.random() < 0.02 else "update"),
            "version": v,
            "event_time_ms": now_ms,
            "name": f"name-{i}-{v}",
            "qualified_name": f"db.schema.name_{i}",
            "parent_id": f"e{i // 10}",
            "description": "a benchmark entity",
            "owner": f"team-{i % 7}",
            "attributes": {"tier": str(i % 3), "v": str(v)},
            "synced_at_ms": now_ms,
        }
        if etype == "lineage":
            rec["source_id"], rec["target_id"] = f"e{(i * 7) % entities}", f"e{(i * 13) % entities}"
        value = json.dumps(rec).encode()
        while True:
            try:
                p.produce(topic, value, eid.encode())
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    if p.flush(120) != 0:
        raise RuntimeError("producing the Spark topic did not finish")
    return versions


def cli(prog: str, description: str) -> argparse.ArgumentParser:
    """The argument parser of a Spark benchmark command, with ``--bootstrap`` (for ``parse``)."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}", description=description)
    parser.add_argument("--bootstrap", default=os.environ.get("LANEWAY_BOOTSTRAP"), help="the Kafka broker")
    return parser


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The arguments, or exit when neither ``--bootstrap`` nor ``LANEWAY_BOOTSTRAP`` names a broker."""
    args = parser.parse_args(argv)
    if not args.bootstrap:
        parser.error("--bootstrap or LANEWAY_BOOTSTRAP is required")
    return args
