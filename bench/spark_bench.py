"""Spark: Laneway's MERGE pipeline (``laneway.spark.pipeline.run_pipeline``) against a plain append.

Both read the same pre-produced ``catalog.entities``-shaped topic from the beginning with
Spark's Kafka source and the available-now trigger, in one Spark session (same settings,
same ``maxOffsetsPerTrigger``), in an order rotated per repeat:

* ``merge``: ``run_pipeline``: parse, quarantine, MERGE into entity_history and entities,
  lineage edges;
* ``append``: the ceiling: parse the same JSON with the same schema and append the rows
  to one Delta table (``foreachBatch`` + ``write.mode("append")``, so the commit time of
  each micro-batch is known and freshness is defined the same way as the pipeline's:
  a record's event time to the commit of the batch that landed it).

The harness side produces the topic; ``python -m bench.spark_bench SPEC RESULT`` runs the
Spark side in its own process.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

__all__ = ["run_spark"]

SIZES = {"quick": (20_000, 2_000, 10_000, 1), "full": (300_000, 20_000, 50_000, 2)}
ENTITY_TYPES = ("database", "table", "column", "owner", "lineage")


def produce_entities(bootstrap: str, topic: str, n: int, entities: int, seed: int = 5) -> dict[str, int]:
    """``n`` catalog.entities records over ``entities`` ids; returns each id's last version."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    rng = random.Random(seed)
    versions: dict[str, int] = {}
    for _ in range(n):
        i = rng.randrange(entities)
        eid = f"e{i}"
        v = versions[eid] = versions.get(eid, 0) + 1
        etype = ENTITY_TYPES[i % len(ENTITY_TYPES)]
        rec: dict[str, Any] = {
            "entity_id": eid,
            "entity_type": etype,
            "op": "create" if v == 1 else ("delete" if rng.random() < 0.02 else "update"),
            "version": v,
            "event_time_ms": int(time.time() * 1000),
            "name": f"name-{i}-{v}",
            "qualified_name": f"db.schema.name_{i}",
            "parent_id": f"e{i // 10}",
            "description": "a benchmark entity",
            "owner": f"team-{i % 7}",
            "attributes": {"tier": str(i % 3), "v": str(v)},
            "synced_at_ms": int(time.time() * 1000),
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


def run_spark(bootstrap: str, kafka: Any, mode: str, out: Path, log: Any) -> dict[str, Any]:
    """Harness side: produce the topic, run the Spark process, return its results."""
    import subprocess

    n, entities, per_trigger, repeats = SIZES[mode]
    topic = kafka.topic("spark", 8)
    t0 = time.monotonic()
    versions = produce_entities(bootstrap, topic, n, entities)
    log(
        f"spark: {n:,} catalog.entities records over {len(versions):,} entities on {topic} "
        f"({time.monotonic() - t0:.0f}s)"
    )
    spec = {
        "bootstrap": bootstrap,
        "topic": topic,
        "records": n,
        "entities": len(versions),
        "version_sum": sum(versions.values()),
        "max_offsets_per_trigger": per_trigger,
        "repeats": repeats,
    }
    spec_path = out / "runs" / "spark.spec.json"
    spec_path.parent.mkdir(parents=True, exist_ok=True)
    spec_path.write_text(json.dumps(spec))
    result_path = out / "runs" / "spark.result.json"
    root = Path(__file__).resolve().parent.parent
    with open(out / "runs" / "spark.stderr", "wb") as err:
        proc = subprocess.run(
            [sys.executable, "-m", "bench.spark_bench", str(spec_path), str(result_path)],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            stdout=subprocess.DEVNULL,
            stderr=err,
            check=False,
        )
    try:
        res: dict[str, Any] = json.loads(result_path.read_text())
    except (OSError, ValueError):
        return {"skipped": f"the Spark process failed (exit {proc.returncode}); see {out}/runs/spark.stderr"}
    for r in res.get("runs", []):
        r["correct"] = not r.get("notes")
        log(
            f"  spark {r['pipeline']:<7} {r['records']:>8,} records  {r['rate']:>8,.0f} rec/s  "
            f"freshness p50 {r.get('freshness_p50_s') or 0:.1f}s p99 {r.get('freshness_p99_s') or 0:.1f}s  "
            f"cpu {r.get('cpu_s', 0):.0f}s  {'ok' if r['correct'] else 'FAIL ' + '; '.join(r['notes'])}"
        )
    res["description"] = (
        f"{n:,} `catalog.entities` records (JSON, the contract in `laneway/spark/schema.py`) over "
        f"{entities:,} entities, 8 partitions, pre-produced; each pipeline reads the topic from the "
        f"beginning with the available-now trigger, `maxOffsetsPerTrigger={per_trigger:,}`, in one "
        "`local[2]` session built by `laneway.spark.session.build_session` (4 shuffle partitions); "
        f"medians of {repeats} run(s) each. *records/s* = records / wall time of the streaming query "
        "(start to termination, table creation included); freshness = event time (stamped at produce) "
        "to the Delta commit of the record's micro-batch, so on a pre-produced backlog it includes the "
        "time the record waited in the backlog. *merge* checks: entity_history holds every (entity, "
        "version) once, entities one row per entity at its last version, quarantine empty; *append*: "
        "every record landed once."
    )
    return res


# ---------------------------------------------------------------------- Spark process


def _cpu_seconds() -> float:
    """This process and its children (the JVM) so far."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


def _append(session: Any, spec: dict[str, Any], path: str, checkpoint: str) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from laneway.spark import schema

    commits: dict[int, float] = {}

    def write(df: Any, batch_id: int) -> None:
        rows = df.select(
            F.from_json(F.col("value").cast("string"), schema.record_schema()).alias("r"),
            F.col("partition").alias("kafka_partition"),
            F.col("offset").alias("kafka_offset"),
        ).select("r.*", "kafka_partition", "kafka_offset", F.lit(batch_id).alias("_batch"))
        rows.drop("_corrupt_record").write.format("delta").mode("append").save(path)
        commits[batch_id] = time.time() * 1000

    query = (
        session.readStream.format("kafka")
        .option("kafka.bootstrap.servers", spec["bootstrap"])
        .option("subscribe", spec["topic"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(spec["max_offsets_per_trigger"]))
        .load()
        .writeStream.option("checkpointLocation", checkpoint)
        .foreachBatch(write)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return commits


def _freshness_from_table(session: Any, path: str, commits: dict[int, float]) -> tuple[float, float]:
    """Weighted p50/p99 of commit time minus event time, per batch, as the pipeline computes it."""
    from pyspark.sql import functions as F

    from laneway.spark.pipeline import _weighted_quantile

    qs = [i / 100 for i in range(101)]
    rows = (
        session.read.format("delta")
        .load(path)
        .groupBy("_batch")
        .agg(F.count("*").alias("n"), F.percentile_approx("event_time_ms", qs, 10_000).alias("q"))
        .collect()
    )
    points = []
    for row in rows:
        committed = commits[int(row["_batch"])]
        w = row["n"] / len(qs)
        points += [(max(0.0, (committed - q) / 1000), w) for q in row["q"]]
    return _weighted_quantile(points, 0.5) or 0.0, _weighted_quantile(points, 0.99) or 0.0


def child(spec: dict[str, Any]) -> dict[str, Any]:
    from prometheus_client import CollectorRegistry

    from laneway.spark import schema
    from laneway.spark.pipeline import PipelineMetrics, PipelineSettings, run_pipeline
    from laneway.spark.session import SessionSettings, build_session

    t0 = time.monotonic()
    session = build_session(SessionSettings(master="local[2]", app_name="laneway-bench"))
    startup = time.monotonic() - t0
    work = Path(tempfile.mkdtemp(prefix="laneway-bench-spark-"))
    n = spec["records"]
    runs: list[dict[str, Any]] = []
    try:
        for rep in range(spec["repeats"]):
            for name in ["merge", "append"] if rep % 2 == 0 else ["append", "merge"]:
                base = work / f"{name}-{rep}"
                cpu0, t = _cpu_seconds(), time.monotonic()
                notes: list[str] = []
                r: dict[str, Any] = {"pipeline": name, "repeat": rep}
                if name == "merge":
                    res = run_pipeline(
                        PipelineSettings(
                            bootstrap=spec["bootstrap"],
                            warehouse=str(base),
                            checkpoint=str(base) + "-checkpoint",
                            topic=spec["topic"],
                            max_offsets_per_trigger=spec["max_offsets_per_trigger"],
                            compact_every=0,
                            master="local[2]",
                        ),
                        spark=session,
                        metrics=PipelineMetrics.create(CollectorRegistry()),
                    )
                    wall, cpu = time.monotonic() - t, _cpu_seconds() - cpu0
                    r.update(
                        records=res.records,
                        batches=len(res.batches),
                        freshness_p50_s=res.freshness_p50_s,
                        freshness_p99_s=res.freshness_p99_s,
                    )
                    hist = session.read.format("delta").load(schema.table_path(base, "entity_history"))
                    ent = session.read.format("delta").load(schema.table_path(base, "entities"))
                    quarantined = (
                        session.read.format("delta").load(schema.table_path(base, "quarantine")).count()
                    )
                    h_rows, h_distinct = hist.count(), hist.select("entity_id", "version").distinct().count()
                    e_rows = ent.count()
                    v_sum = ent.agg({"version": "sum"}).first()[0] or 0  # type: ignore[index]
                    if res.records != n:
                        notes.append(f"read {res.records} of {n} records")
                    if h_rows != n or h_distinct != n:
                        notes.append(f"entity_history {h_rows} rows, {h_distinct} distinct, expected {n}")
                    if e_rows != spec["entities"] or v_sum != spec["version_sum"]:
                        notes.append(f"entities {e_rows} rows (expected {spec['entities']}), version sum off")
                    if quarantined:
                        notes.append(f"{quarantined} quarantined")
                else:
                    path = str(base / "raw")
                    commits = _append(session, spec, path, str(base) + "-checkpoint")
                    wall, cpu = time.monotonic() - t, _cpu_seconds() - cpu0
                    table = session.read.format("delta").load(path)
                    rows = table.count()
                    distinct = table.select("entity_id", "version").distinct().count()
                    p50, p99 = _freshness_from_table(session, path, commits)
                    r.update(records=rows, batches=len(commits), freshness_p50_s=p50, freshness_p99_s=p99)
                    if rows != n or distinct != n:
                        notes.append(f"{rows} rows, {distinct} distinct, expected {n}")
                r.update(wall_s=wall, cpu_s=cpu, rate=n / wall if wall else 0.0, notes=notes)
                runs.append(r)
                shutil.rmtree(base, ignore_errors=True)
    finally:
        session.stop()
        shutil.rmtree(work, ignore_errors=True)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"session_startup_s": startup, "python_maxrss_mb": ru.ru_maxrss / 1024, "runs": runs}


def main(argv: list[str]) -> int:
    spec_path, result_path = argv
    spec = json.loads(Path(spec_path).read_text())
    try:
        out = child(spec)
    except BaseException:
        out = {"skipped": "the Spark run failed: " + traceback.format_exc()[-1500:]}
    Path(result_path).write_text(json.dumps(out))
    return 0 if "runs" in out else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
