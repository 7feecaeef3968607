"""The Spark process (``python -m bench.spark_bench SPEC RESULT``, started by ``run_spark``).

``child`` warms each contender up, then times and checks their backlog runs and their live
phase, and returns what the harness reads back.
"""

from __future__ import annotations

import resource
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from bench.spark_checkout import _pipeline
from bench.spark_common import APPENDS, FLOOR, LIVE_TRIGGER, contenders, produce_entities
from bench.spark_contenders import _append, _floor, _run_backlog_pipeline, _source_options, _warm_up
from bench.spark_cpu import _cpu_seconds, _jobs_so_far, _jvm_cpu, _jvm_cpu_split, _processes_started


def _freshness_from_table(session: Any, path: str, commits: dict[int, float]) -> tuple[float, float]:
    """Weighted p50/p99 of commit time minus event time, per batch, as the pipeline computes it."""
    from pyspark.sql import functions as F

    from laneway.spark.metrics import _weighted_quantile

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
    from laneway.spark.session import SessionSettings, build_session

    t0 = time.monotonic()
    session = build_session(SessionSettings(master="local[2]", app_name="laneway-bench"))
    startup = time.monotonic() - t0
    work = Path(tempfile.mkdtemp(prefix="laneway-bench-spark-"))
    runs: list[dict[str, Any]] = []
    try:
        t0 = time.monotonic()
        names = contenders()
        for name in names:
            _warm_up(session, spec, name, work / f"warmup-{name}")
        warmup = time.monotonic() - t0
        for rep in range(spec["repeats"]):
            for name in names if rep % 2 == 0 else names[::-1]:
                base = work / f"{name}-{rep}"
                runs.append(_backlog_run(session, spec, name, base, rep))
                shutil.rmtree(base, ignore_errors=True)
        live = [_live_or_failure(session, spec, name, work / f"live-{name}") for name in names]
    finally:
        session.stop()
        shutil.rmtree(work, ignore_errors=True)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "session_startup_s": startup,
        "warmup_s": warmup,
        "python_maxrss_mb": ru.ru_maxrss / 1024,
        "runs": runs,
        "live": live,
    }


def _backlog_run(session: Any, spec: dict[str, Any], name: str, base: Path, rep: int) -> dict[str, Any]:
    """One timed backlog run of contender ``name`` over ``spec["topic"]``, checked; its figures."""
    from laneway.spark import schema

    n = spec["records"]
    wait_s = (time.time() * 1000 - spec["produced_end_ms"]) / 1000
    jobs0, forks0 = _jobs_so_far(session), _processes_started()
    jvm0 = _jvm_cpu()
    cpu0, t = _cpu_seconds(), time.monotonic()
    notes: list[str] = []
    r: dict[str, Any] = {"pipeline": name, "repeat": rep}
    if name == FLOOR:
        batches = _floor(session, spec, base)
        wall, cpu = time.monotonic() - t, _cpu_seconds() - cpu0
        jobs1, forks1, jvm1 = _jobs_so_far(session), _processes_started(), _jvm_cpu()
        history = session.read.format("delta").load(schema.table_path(base, "entity_history"))
        rows, distinct = history.count(), history.select("entity_id", "version").distinct().count()
        r.update(records=rows, batches=batches)
        if rows != n or distinct != n:
            notes.append(f"entity_history {rows} rows, {distinct} distinct, expected {n}")
    elif name not in APPENDS:
        res = _run_backlog_pipeline(session, spec, name, base)
        wall, cpu = time.monotonic() - t, _cpu_seconds() - cpu0
        jobs1, forks1, jvm1 = _jobs_so_far(session), _processes_started(), _jvm_cpu()
        r.update(
            records=res.records,
            batches=len(res.batches),
            batch_s=[b.duration_s for b in res.batches],
            freshness_p50_s=res.freshness_p50_s,
            freshness_p99_s=res.freshness_p99_s,
            files=_table_files(session, schema.table_path(base, "entities")),
        )
        hist = session.read.format("delta").load(schema.table_path(base, "entity_history"))
        ent = session.read.format("delta").load(schema.table_path(base, "entities"))
        quarantined = session.read.format("delta").load(schema.table_path(base, "quarantine")).count()
        h_rows, h_distinct = hist.count(), hist.select("entity_id", "version").distinct().count()
        e_rows = ent.count()
        v_sum = ent.agg({"version": "sum"}).first()[0] or 0
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
        commits = _append(session, spec, path, str(base) + "-checkpoint", options=_source_options(name))
        wall, cpu = time.monotonic() - t, _cpu_seconds() - cpu0
        jobs1, forks1, jvm1 = _jobs_so_far(session), _processes_started(), _jvm_cpu()
        table = session.read.format("delta").load(path)
        rows = table.count()
        distinct = table.select("entity_id", "version").distinct().count()
        p50, p99 = _freshness_from_table(session, path, commits)
        r.update(records=rows, batches=len(commits), freshness_p50_s=p50, freshness_p99_s=p99)
        r.update(files=_table_files(session, path))
        if rows != n or distinct != n:
            notes.append(f"{rows} rows, {distinct} distinct, expected {n}")
    r.update(wall_s=wall, cpu_s=cpu, rate=n / wall if wall else 0.0, notes=notes)
    split = _jvm_cpu_split(jvm0, jvm1)
    if split is not None:  # the JVM's CPU over the run, by kind of thread (the sweep prints it)
        r["jvm_cpu_s"] = split
    if jobs0 is not None and jobs1 is not None:
        r["spark_jobs"] = jobs1 - jobs0
    if forks0 is not None and forks1 is not None:  # machine-wide: other work on the box counts too
        r["processes_started"] = forks1 - forks0
    r["backlog_wait_s"] = wait_s
    for q in ("p50", "p99"):
        f = r.get(f"freshness_{q}_s")
        r[f"landing_{q}_s"] = max(0.0, f - wait_s) if f is not None else None
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(str(base) + "-checkpoint", ignore_errors=True)
    return r


def _table_files(session: Any, path: str) -> int:
    """The files of the Delta table at ``path`` (its current snapshot)."""
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(session, path).detail().select("numFiles").first()[0])


def _live_or_failure(session: Any, spec: dict[str, Any], name: str, base: Path) -> dict[str, Any]:
    try:
        return _live(session, spec, name, base)
    except Exception:
        err = traceback.format_exc().strip().splitlines()[-1]
        return {"pipeline": name, "phase": "live", "records": 0, "rate": 0.0, "notes": [f"failed: {err}"]}


def _live(session: Any, spec: dict[str, Any], name: str, base: Path) -> dict[str, Any]:
    """Produce at a fixed rate while the pipeline runs on a processing-time trigger."""
    import threading

    from prometheus_client import CollectorRegistry

    from laneway.spark import schema

    live = spec["live"]
    topic = live["topics"][name]
    n = int(live["rate"] * live["seconds"])
    produced: dict[str, float] = {}

    def produce() -> None:
        t0 = time.monotonic()
        produce_entities(spec["bootstrap"], topic, n, live["entities"], rate=live["rate"], seed=9)
        produced["seconds"] = time.monotonic() - t0

    producer = threading.Thread(target=produce, daemon=True)
    deadline = time.monotonic() + live["seconds"] + 300
    notes: list[str] = []
    r: dict[str, Any] = {"pipeline": name, "phase": "live", "rate_in": live["rate"]}
    cpu0, t = _cpu_seconds(), time.monotonic()
    with _pipeline(session, name) as pipeline:
        if name not in APPENDS:
            metrics = pipeline.PipelineMetrics.create(CollectorRegistry())
            stop = threading.Event()

            def watch() -> None:
                while time.monotonic() < deadline and metrics.records._value.get() < n:
                    time.sleep(0.5)
                stop.set()

            pipeline.ensure_tables(session, str(base))  # before producing: the append has no tables to create
            producer.start()
            threading.Thread(target=watch, daemon=True).start()
            res = pipeline.run_pipeline(
                pipeline.PipelineSettings(
                    bootstrap=spec["bootstrap"],
                    warehouse=str(base),
                    checkpoint=str(base) + "-checkpoint",
                    topic=topic,
                    trigger=LIVE_TRIGGER,
                    compact_every=0,
                    master="local[2]",
                ),
                spark=session,
                stop_event=stop,
                metrics=metrics,
            )
            hist = session.read.format("delta").load(schema.table_path(base, "entity_history")).count()
            r.update(
                records=res.records,
                batches=len(res.batches),
                freshness_p50_s=res.freshness_p50_s,
                freshness_p99_s=res.freshness_p99_s,
            )
            if res.records != n or hist != n:
                notes.append(f"read {res.records}, entity_history {hist}, expected {n}")
        else:
            producer.start()
            path = str(base / "raw")
            commits = _append(
                session,
                spec | {"topic": topic},
                path,
                str(base) + "-checkpoint",
                live_n=n,
                options=_source_options(name),
            )
            rows = session.read.format("delta").load(path).count()
            p50, p99 = _freshness_from_table(session, path, commits)
            r.update(records=rows, batches=len(commits), freshness_p50_s=p50, freshness_p99_s=p99)
            if rows != n:
                notes.append(f"{rows} rows, expected {n}")
    producer.join(60)
    seconds = produced.get("seconds", live["seconds"])  # the real producing time: the rate is checked
    r.update(wall_s=time.monotonic() - t, cpu_s=_cpu_seconds() - cpu0, rate=r["records"] / seconds)
    r["produce_s"] = seconds
    r["notes"] = notes
    shutil.rmtree(base, ignore_errors=True)
    return r
