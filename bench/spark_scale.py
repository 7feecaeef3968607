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
``--variants`` picks some; ``before`` is the default pipeline of another checkout
(``LANEWAY_BENCH_SPARK_BASELINE``, as in ``bench.spark_bench``), for a change measured side
by side. The landing runs go first, in a
fresh JVM, one variant after the other: compare the batches, which alternate. The benchmark's
backlog (``bench.spark_bench``) updates ~97% of a 30,000-row ``entities`` per batch; this is
the other end: a few thousand of a million.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.spark_bench import _pipeline, cli, parse

VARIANTS = ("rewrite", "dv", "dv-always", "before")


def _run(session: Any, bootstrap: str, topic: str, base: Path, variant: str) -> tuple[float, Any]:
    from prometheus_client import CollectorRegistry

    with _pipeline(session, "merge-before" if variant == "before" else "merge") as pipeline:
        # set where the choice reads it: the module defining it, whatever the checkout's layout
        owners = [m for m in pipeline.modules.values() if "DELETION_VECTORS_SHARE_MAX" in vars(m)]
        shares = [m.DELETION_VECTORS_SHARE_MAX for m in owners]
        if variant == "dv-always":
            for m in owners:
                m.DELETION_VECTORS_SHARE_MAX = float("inf")
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
                    deletion_vectors=variant in ("dv", "dv-always"),
                ),
                spark=session,
                metrics=pipeline.PipelineMetrics.create(CollectorRegistry()),
            )
        finally:
            for m, share in zip(owners, shares, strict=True):
                m.DELETION_VECTORS_SHARE_MAX = share
        return time.monotonic() - t0, res


def _entities_state(session: Any, base: Path) -> dict[str, Any]:
    from delta.tables import DeltaTable

    from laneway.spark import schema

    table = DeltaTable.forPath(session, schema.table_path(base / "warehouse", schema.ENTITIES))
    files = table.detail().select("numFiles").first()[0]
    last = table.history(5).where("operation = 'MERGE'").orderBy("version", ascending=False).first()
    metrics = dict(last["operationMetrics"]) if last is not None else {}
    return {
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
    from bench.spark_bench import produce_entities
    from laneway.spark import schema
    from laneway.spark.session import SessionSettings, build_session

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
                    f"+{state['files_added']} -{state['files_removed']}, {state['files']} files",
                    flush=True,
                )
        # both variants' final state must be the same
        states = [
            session.read.format("delta")
            .load(schema.table_path(work / v / "warehouse", schema.ENTITIES))
            .selectExpr("count(*) AS n", "sum(version) AS s")
            .first()
            for v in variants
        ]
        expected = (len(versions), sum(versions.values()))
        for v, st in zip(variants, states, strict=True):
            ok = (st["n"], st["s"]) == expected
            median = statistics.median(times[v])
            print(f"{v:<8} median {median:.2f} s per batch; entities {'ok' if ok else 'WRONG'}")
    finally:
        session.stop()
        kafka.delete_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
