"""Small live batches on a large catalog: the pipeline's batch time as ``entities`` grows.

``python -m bench.spark_scale [--entities 1000000] [--batches 5] [--batch 3000]``
(``LANEWAY_BOOTSTRAP`` or ``--bootstrap``):

1. produces ``--entities`` records over as many entity ids (picked at random: ~63% distinct)
   and lands them with the pipeline (available-now), once per variant, each into its own
   warehouse;
2. then ``--batches`` times: produces ``--batch`` more records over the same ids (newer
   versions of random entities: a live stream's batch on a big catalog) and runs each
   variant's pipeline over them from its checkpoint (one micro-batch), in alternating order,
   timing each run and reading ``entities``' file count and its last MERGE's metrics.

Variants: ``rewrite`` (the pipeline's default: a MERGE rewrites every file holding a matched
row), ``dv`` (``deletion_vectors=True``: the MERGE of a batch small against the table marks the
old rows deleted and writes only the new ones, a larger batch rewrites) and ``dv-always`` (every
MERGE with deletion vectors, however large the batch, but the first into an empty table).
Each batch's line shows the pipeline's phase times (``laneway.spark.batch``'s debug log).
``--variants`` picks some; ``before`` is the default pipeline of another checkout
(``LANEWAY_BENCH_SPARK_BASELINE``, as in ``bench.spark_bench``), for a change measured side
by side. The landing runs go first, in a
fresh JVM, one variant after the other: compare the batches, which alternate. The benchmark's
backlog (``bench.spark_bench``) updates ~97% of a 30,000-row ``entities`` per batch; this is
the other end: a few thousand of a million.
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.spark_checkout import _pipeline
from bench.spark_common import cli, parse

VARIANTS = ("rewrite", "dv", "dv-always", "before")
#: the module constants a variant overrides for its runs: (name, value, variants)
_OVERRIDES = (("DELETION_VECTORS_SHARE_MAX", float("inf"), ("dv-always",)),)


def _run(session: Any, bootstrap: str, topic: str, base: Path, variant: str) -> tuple[float, Any]:
    from prometheus_client import CollectorRegistry

    with _pipeline(session, "merge-before" if variant == "before" else "merge") as pipeline:
        # set where the choice reads it: the module defining it, whatever the checkout's layout
        saved = [
            (m, name, vars(m)[name])
            for name, value, which in _OVERRIDES
            if variant in which
            for m in pipeline.modules.values()
            if name in vars(m)
        ]
        for m, name, _ in saved:
            setattr(m, name, next(value for n, value, _ in _OVERRIDES if n == name))
        t0 = time.monotonic()
        try:
            res = pipeline.run_pipeline(
                pipeline.PipelineSettings(
                    bootstrap=bootstrap,
                    warehouse=str(base / "warehouse"),
                    checkpoint=str(base / "checkpoint"),
                    topic=topic,
                    max_offsets_per_trigger=250_000,
                    compact_every=0,
                    master="local[2]",
                    deletion_vectors=variant.startswith("dv"),
                ),
                spark=session,
                metrics=pipeline.PipelineMetrics.create(CollectorRegistry()),
            )
        finally:
            for m, name, value in saved:
                setattr(m, name, value)
        return time.monotonic() - t0, res


class _Phases(logging.Handler):
    """Keeps the last batch's phase times (``laneway.spark.batch`` logs them at debug)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if " phases: " in message:
            self.last = message.split(" phases: ", 1)[1]


def _entities_state(session: Any, base: Path) -> dict[str, Any]:
    from delta.tables import DeltaTable

    from laneway.spark import schema

    table = DeltaTable.forPath(session, schema.table_path(base / "warehouse", schema.ENTITIES))
    files = table.detail().select("numFiles").first()[0]
    last = table.history(5).where("operation = 'MERGE'").orderBy("version", ascending=False).first()
    metrics = dict(last["operationMetrics"]) if last is not None else {}
    edges = DeltaTable.forPath(session, schema.table_path(base / "warehouse", schema.LINEAGE_EDGES))
    return {
        "edges_operation": edges.history(1).first()["operation"],
        "files": files,
        "rows_updated": int(metrics.get("numTargetRowsUpdated", 0)),
        "rows_copied": int(metrics.get("numTargetRowsCopied", 0)),
        "files_added": int(metrics.get("numTargetFilesAdded", 0)),
        "files_removed": int(metrics.get("numTargetFilesRemoved", 0)),
    }


def main(argv: list[str]) -> int:
    parser = cli("bench.spark_scale", __doc__.split("\n")[0])
    parser.add_argument("--entities", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--batch", type=int, default=3_000)
    parser.add_argument(
        "--variants",
        default="rewrite,dv",
        help=f"comma-separated, of {', '.join(VARIANTS)} (default: rewrite,dv)",
    )
    args = parse(parser, argv)
    variants = tuple(v.strip() for v in args.variants.split(","))
    if not variants or any(v not in VARIANTS for v in variants):
        parser.error(f"--variants: each of {', '.join(VARIANTS)}")

    from bench.kafka_io import Kafka
    from bench.spark_common import produce_entities
    from laneway.spark import schema
    from laneway.spark.session import SessionSettings, build_session

    phases = _Phases()
    batch_logger = logging.getLogger("laneway.spark.batch")
    batch_logger.addHandler(phases)
    batch_logger.setLevel(logging.DEBUG)
    kafka = Kafka(args.bootstrap)
    waited = kafka.wait_for_groups()
    print(f"the broker's group coordinator answers (waited {waited:.1f} s)", flush=True)
    topic = kafka.topic("spark-scale", 8)
    t0 = time.monotonic()
    versions = produce_entities(args.bootstrap, topic, args.entities, args.entities)
    print(
        f"{args.entities:,} records over {len(versions):,} entities ({time.monotonic() - t0:.0f} s)",
        flush=True,
    )
    session = build_session(SessionSettings(master="local[2]", app_name="laneway-bench-scale"))
    work = Path(tempfile.mkdtemp(prefix="laneway-bench-scale-"))
    times: dict[str, list[float]] = {v: [] for v in variants}
    try:
        for variant in variants:
            base = work / variant
            took, res = _run(session, args.bootstrap, topic, base, variant)
            state = _entities_state(session, base)
            print(
                f"{variant:<8} landed {res.records:,} records in {took:.1f} s ({len(res.batches)} batches); "
                f"entities: {state['files']} files",
                flush=True,
            )
        for k in range(args.batches):
            produce_entities(
                args.bootstrap, topic, args.batch, args.entities, seed=100 + k, versions=versions
            )
            for variant in variants if k % 2 == 0 else variants[::-1]:
                took, res = _run(session, args.bootstrap, topic, work / variant, variant)
                times[variant].append(took)
                state = _entities_state(session, work / variant)
                print(
                    f"batch {k} {variant:<8} {res.records:,} records in {took:.2f} s; entities MERGE: "
                    f"{state['rows_updated']:,} rows updated, {state['rows_copied']:,} copied, files "
                    f"+{state['files_added']} -{state['files_removed']}, {state['files']} files; "
                    f"lineage_edges: {state['edges_operation']}; phases: {phases.last}",
                    flush=True,
                )

        # every variant's final state must be the same
        def digest(v: str, table: schema.TableName, key: str) -> tuple[int, int, int]:
            row = (
                session.read.format("delta")
                .load(schema.table_path(work / v / "warehouse", table))
                .selectExpr("count(*) AS n", "sum(version) AS s", f"sum(hash({key})) AS h")
                .first()
            )
            return row["n"], row["s"], row["h"]

        expected = (len(versions), sum(versions.values()))
        edges = {
            v: digest(v, schema.LINEAGE_EDGES, "edge_id, source_id, target_id, version") for v in variants
        }
        for v in variants:
            ok = digest(v, schema.ENTITIES, "entity_id")[:2] == expected
            same = edges[v] == edges[variants[0]]
            median = statistics.median(times[v])
            print(
                f"{v:<16} median {median:.2f} s per batch ({' '.join(f'{t:.2f}' for t in times[v])}); "
                f"entities {'ok' if ok else 'WRONG'}; lineage_edges "
                f"{'as ' + variants[0] if same else 'DIFFERENT from ' + variants[0]} ({edges[v][0]:,} edges)"
            )
    finally:
        session.stop()
        kafka.delete_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
