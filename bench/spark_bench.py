"""Spark: Laneway's MERGE pipeline (``laneway.spark.pipeline.run_pipeline``) against a plain append.

Both read the same pre-produced ``catalog.entities``-shaped topic from the beginning with
Spark's Kafka source and the available-now trigger, in one Spark session (same settings,
same ``maxOffsetsPerTrigger``), each once untimed to warm the JVM, then in an order
rotated per repeat:

* ``merge``: ``run_pipeline``: parse, quarantine, MERGE into entity_history and entities,
  lineage edges;
* ``append``: the ceiling: parse the same JSON with the same schema and append the rows
  to one Delta table (``foreachBatch`` + ``write.mode("append")``, so the commit time of
  each micro-batch is known and freshness is defined the same way as the pipeline's:
  a record's event time to the commit of the batch that landed it), Spark's Kafka source
  at its defaults;
* ``append-tuned``: the same append with the pipeline's Kafka source options
  (``laneway.spark.settings.SOURCE_DEFAULTS``): what the MERGE costs beyond the append,
  like for like. Ratios are given against both.

With ``LANEWAY_BENCH_SPARK_BASELINE`` set to the root of another checkout of the project
(``git archive <commit> laneway | tar -x -C DIR``), a third contender, ``merge-before``, runs
that checkout's pipeline (its ``laneway/spark`` modules) in the same session, with that checkout's
runtime session settings (``spark.sql.*``, ``spark.databricks.delta.*``) applied around its
runs: a before/after measured side by side, through the same checks.

The harness side produces the topic; ``python -m bench.spark_bench SPEC RESULT`` runs the
Spark side in its own process.

``python -m bench.spark_bench sweep 30000/3000/15000 300000/30000/100000 --repeats 3`` runs
the backlog part alone at several sizes (records/entities/maxOffsetsPerTrigger), side by
side in one session, and prints per size each contender's median records/s, its ratio to the
append, Spark jobs and processes started per micro-batch, and (Linux) the JVM's CPU seconds by
kind of thread: Spark tasks, the JIT compilers, garbage collection, the rest (driver, scheduler).

Each size's table gives the pipeline's batch time (median / longest; an append's wall time per
batch) and the table's files at the end (``entities`` for the pipeline). ``PER_TRIGGER`` 0 runs
without ``maxOffsetsPerTrigger``: the whole backlog in one batch, as the pipeline does with
``max_offsets_per_trigger=0`` (its default caps a batch at 1,000,000 records). The catalog
scale is ``5000000/5000000/250000`` (3,160,521 entities, about 12 minutes here with ``--only
merge,merge-dv,append``). ``sweep --deletion-vectors`` adds ``merge-dv``, the pipeline with
``deletion_vectors=True``; ``--only`` runs just the named contenders.

``sweep --floor`` adds a contender, ``floor``: a lower bound for any pipeline that keeps the
three tables. Per micro-batch it does what every such design must and nothing more: the
pipeline's own read (parse, partition by entity, persist), its newest-version-per-entity
aggregate, and three blind appends side by side, into the pipeline's own tables (same schemas,
same statistics columns, same session settings): the batch's rows to ``entity_history``, the
newest rows to ``entities``, the newest live lineage rows to ``lineage_edges``. No table is
read, nothing is merged or deduplicated, so its tables are not correct: only its speed is
compared. Checked: ``entity_history`` holds every record once.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.abc
import importlib.util
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

__all__ = ["run_spark"]

#: records, entities, maxOffsetsPerTrigger, repeats (Spark on 2 shared cores is slow: sized to finish).
#: Full mode was 30,000 records in 15,000-record batches: the MERGE pipeline's ratio to the
#: append is higher there (0.45-0.50, against 0.34-0.42 at 150,000-300,000 records in
#: 50,000-100,000-record batches, side by side in one session: ``python -m bench.spark_bench
#: sweep``, BENCHMARKS.md), as the append's cost is nearly all per batch and the pipeline's
#: is not; real backlogs are millions of records. Full mode's Spark part: 6-9 min here (6 in session 8).
SIZES = {"quick": (10_000, 1_000, 5_000, 1), "full": (300_000, 30_000, 100_000, 3)}
#: the live phase: records/s produced while each pipeline runs on a processing-time trigger, seconds
LIVE = {"quick": (10.0, 40.0), "full": (20.0, 60.0)}
#: the pipeline's recommended processing-time trigger, for both contenders (see laneway.spark.settings)
LIVE_TRIGGER = "10 seconds"
ENTITY_TYPES = ("database", "table", "column", "owner", "lineage")
#: the root of another checkout whose pipeline runs as the ``merge-before`` contender
BASELINE_ENV = "LANEWAY_BENCH_SPARK_BASELINE"


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


#: the plain appends: Spark's Kafka source at its defaults, and with the pipeline's source options
APPENDS = ("append", "append-tuned")
#: the lower bound of a pipeline keeping the three tables (module docstring; ``sweep --floor``)
FLOOR = "floor"
#: the pipeline with ``deletion_vectors=True`` (``sweep --deletion-vectors``): each batch small
#: against ``entities`` MERGEs with deletion vectors, a larger one rewrites
MERGE_DV = "merge-dv"


def contenders() -> list[str]:
    merges = ["merge", "merge-before"] if os.environ.get(BASELINE_ENV) else ["merge"]
    return [*merges, *APPENDS]


def _source_options(name: str) -> dict[str, str]:
    """The Kafka source options of append contender ``name`` (besides servers, topic, offsets)."""
    from laneway.spark.settings import SOURCE_DEFAULTS

    return dict(SOURCE_DEFAULTS) if name == "append-tuned" else {}


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


def run_spark(bootstrap: str, kafka: Any, mode: str, out: Path, log: Any) -> dict[str, Any]:
    """Harness side: produce the topic, run the Spark process, return its results."""
    import subprocess

    n, entities, per_trigger, repeats = SIZES[mode]
    live_rate, live_seconds = LIVE[mode]
    kafka.wait_for_groups()  # the pipeline commits its progress to a group: measure once they work
    topic = kafka.topic("spark", 8)
    live_topics = {name: kafka.topic(f"spark-live-{name}", 8) for name in contenders()}
    t0 = time.monotonic()
    versions = produce_entities(bootstrap, topic, n, entities)
    log(
        f"spark: {n:,} catalog.entities records over {len(versions):,} entities on {topic} "
        f"({time.monotonic() - t0:.0f}s)"
    )
    spec = {
        **_backlog_spec(bootstrap, topic, n, versions, per_trigger),
        "repeats": repeats,
        "live": {"rate": live_rate, "seconds": live_seconds, "topics": live_topics, "entities": entities},
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
    for r in res.get("runs", []) + res.get("live", []):
        r["correct"] = not r.get("notes")
        log(
            f"  spark {r['pipeline']:<7} {r.get('phase', 'backlog'):<8} {r['records']:>8,} records  "
            f"{r['rate']:>8,.0f} rec/s  "
            f"freshness p50 {r.get('freshness_p50_s') or 0:.1f}s p99 {r.get('freshness_p99_s') or 0:.1f}s  "
            f"cpu {r.get('cpu_s', 0):.0f}s  {'ok' if r['correct'] else 'FAIL ' + '; '.join(r['notes'])}"
        )
    res["description"] = (
        f"{n:,} `catalog.entities` records (JSON, the contract in `laneway/spark/schema.py`) over "
        f"{entities:,} entities, 8 partitions, pre-produced; each pipeline reads the topic from the "
        f"beginning with the available-now trigger, `maxOffsetsPerTrigger={per_trigger:,}`, in one "
        "`local[2]` session built by `laneway.spark.session.build_session` (4 shuffle partitions); "
        f"medians of {repeats} run(s) each, timed after one untimed warm-up run of each over the "
        "same topic (a fresh JVM compiles as it goes: without it the contender timed first paid "
        "for that alone). *records/s* = records / wall time of the streaming query "
        "(start to termination, table creation included). On a backlog, freshness (event time, stamped "
        "at produce, to the Delta commit of the record's micro-batch) mostly measures how long the "
        "record waited before the query started, so the backlog table gives *landing time* instead: "
        "the same quantiles minus the wait between the end of producing and the query's start. The "
        f"*live* table is the real freshness: {live_rate:.0f} records/s produced for {live_seconds:.0f} s "
        f"while each pipeline runs on a `{LIVE_TRIGGER}` processing-time trigger. *merge* checks: "
        "entity_history holds every (entity, version) once, entities one row per entity at its last "
        "version (backlog), quarantine empty; *append*: every record landed once. *append-tuned*: "
        "the same append with the pipeline's Kafka source options (`SOURCE_DEFAULTS` in "
        "`laneway/spark/settings.py`: a short `kafka.fetch.max.wait.ms`), so that *÷ append-tuned* "
        "is the MERGE's cost alone."
    )
    if os.environ.get(BASELINE_ENV):
        res["description"] += (
            " *merge-before*: the pipeline of another checkout (the one before the change measured), "
            "same session, same checks."
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
    return float(total)


#: what a MERGE contender is run through, in whichever of its checkout's modules defines it
ENTRY = ("run_pipeline", "PipelineSettings", "PipelineMetrics", "ensure_tables")
#: the modules of ``laneway/spark`` a contender is not run through
_NOT_PIPELINE = frozenset({"__init__", "cli"})


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Imports ``laneway.spark.<name>`` from another checkout's ``laneway/spark`` folder."""

    def __init__(self, folder: Path, names: frozenset[str]) -> None:
        self.folder = folder
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        package, _, name = fullname.rpartition(".")
        if package != "laneway.spark" or name not in self.names:
            return None
        return importlib.util.spec_from_file_location(fullname, self.folder / f"{name}.py")


def _checkout_modules(root: Path) -> dict[str, ModuleType]:
    """The Spark modules of the checkout at ``root``, by name, importing each other (``from
    laneway.spark.x import ...``, ``from laneway.spark import x``), not this checkout's: for
    the import, this checkout's are set aside in ``sys.modules`` and the ``laneway.spark``
    package, then put back. An import inside a function, run later, would get this checkout's."""
    folder = root / "laneway" / "spark"
    names = frozenset(p.stem for p in folder.glob("*.py")) - _NOT_PIPELINE
    package = importlib.import_module("laneway.spark")
    modules = {n: sys.modules.pop(f"laneway.spark.{n}", None) for n in names}
    attributes = {n: package.__dict__.pop(n, None) for n in names}
    finder = _CheckoutFinder(folder, names)
    sys.meta_path.insert(0, finder)
    try:
        return {n: importlib.import_module(f"laneway.spark.{n}") for n in sorted(names)}
    finally:
        sys.meta_path.remove(finder)
        for n in names:
            sys.modules.pop(f"laneway.spark.{n}", None)
            package.__dict__.pop(n, None)
            if modules[n] is not None:
                sys.modules[f"laneway.spark.{n}"] = modules[n]
            if attributes[n] is not None:
                setattr(package, n, attributes[n])


def _current_modules() -> dict[str, ModuleType]:
    """This checkout's Spark modules, by name."""
    import laneway.spark

    folder = Path(laneway.spark.__path__[0])
    names = sorted(frozenset(p.stem for p in folder.glob("*.py")) - _NOT_PIPELINE)
    return {n: importlib.import_module(f"laneway.spark.{n}") for n in names}


def _entry(modules: Mapping[str, ModuleType]) -> SimpleNamespace:
    """A contender's ``ENTRY`` names, wherever its modules define them, and ``modules``."""
    found = {name: next(vars(m)[name] for m in modules.values() if name in vars(m)) for name in ENTRY}
    return SimpleNamespace(modules=dict(modules), **found)


@functools.cache
def _baseline() -> tuple[SimpleNamespace, dict[str, str]]:
    """The baseline checkout's pipeline (``_entry``) and its runtime session settings."""
    modules = _checkout_modules(Path(os.environ[BASELINE_ENV]))
    conf = modules["session"].SessionSettings(master="local[2]").spark_conf([])
    runtime = {k: v for k, v in conf.items() if k.startswith(("spark.sql.", "spark.databricks.delta."))}
    return _entry(modules), runtime


@contextlib.contextmanager
def _pipeline(session: Any, name: str) -> Any:
    """The pipeline of contender ``name`` (``_entry``), with its session settings applied meanwhile."""
    if name != "merge-before":
        yield _entry(_current_modules())
        return
    module, conf = _baseline()
    saved: dict[str, str | None] = {}
    for key, value in conf.items():
        with contextlib.suppress(Exception):  # static settings cannot change in a running session
            before = session.conf.get(key, None)
            session.conf.set(key, value)
            saved[key] = before
    try:
        yield module
    finally:
        for key, before in saved.items():
            if before is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, before)


def _append(
    session: Any,
    spec: dict[str, Any],
    path: str,
    checkpoint: str,
    live_n: int | None = None,
    options: dict[str, str] | None = None,
) -> dict[int, float]:
    """The plain append; available-now, or (``live_n``) a processing-time trigger until
    ``live_n`` records were read; ``options``: more Kafka source options. Returns each
    micro-batch's commit time (ms)."""
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

    reader = (
        session.readStream.format("kafka")
        .option("kafka.bootstrap.servers", spec["bootstrap"])
        .option("subscribe", spec["topic"])
        .option("startingOffsets", "earliest")
        .options(**(options or {}))
    )
    if live_n is None and spec["max_offsets_per_trigger"]:  # 0: no limit (one batch per run)
        reader = reader.option("maxOffsetsPerTrigger", str(spec["max_offsets_per_trigger"]))
    stream = reader.load().writeStream.option("checkpointLocation", checkpoint).foreachBatch(write)
    if live_n is None:
        query = stream.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = stream.trigger(processingTime=LIVE_TRIGGER).start()
        deadline = time.monotonic() + spec["live"]["seconds"] + 300
        while time.monotonic() < deadline:
            if sum(p["numInputRows"] for p in query.recentProgress) >= live_n:
                break
            time.sleep(0.5)
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return commits


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


#: JVM thread names (Linux truncates them to 15 characters) -> the kind of work they do. Spark
#: 4.2 renames an idle task thread "Executor task idle worker" (was "... launch worker-N"), and
#: the CPU of a thread is read under the name it has at the end of a run.
_THREAD_KINDS = (("Executor task ", "tasks"), ("C1 CompilerThre", "jit"), ("C2 CompilerThre", "jit"))
_GC_THREADS = ("GC Thread", "G1 ", "VM Thread", "Sweeper thread")


def _thread_kind(name: str) -> str:
    """tasks, jit, gc or other: the kind of work of a JVM thread named ``name`` (as ``/proc`` has it)."""
    kind = next((k for prefix, k in _THREAD_KINDS if name.startswith(prefix)), None)
    return kind or ("gc" if name.startswith(_GC_THREADS) else "other")


def _jvm_cpu() -> dict[str, float] | None:
    """CPU seconds so far of the session's JVM (Linux ``/proc``): ``total`` and its live threads
    by id as (kind, seconds), kind one of tasks (Spark tasks), jit (the JIT compilers), gc (the
    collectors, safepoints, code cache sweeper) or other (driver, scheduler, ...); None elsewhere."""
    import psutil

    jvm = next((c for c in psutil.Process().children(recursive=True) if c.name() == "java"), None)
    if jvm is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, Any] = {"total": float(sum(jvm.cpu_times()[:2])), "threads": {}}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{jvm.pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{jvm.pid}/task/{tid}/stat").read_text()
                name = stat[stat.index("(") + 1 : stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2 :].split()
                out["threads"][tid] = (_thread_kind(name), (int(fields[11]) + int(fields[12])) / tick)
    return out


def _jvm_cpu_split(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, float] | None:
    """The JVM's CPU seconds between two ``_jvm_cpu`` readings by kind of thread; threads that
    ended meanwhile (a query's stream thread, py4j callback threads) count as other."""
    if before is None or after is None:
        return None
    split = dict.fromkeys(("tasks", "jit", "gc", "other"), 0.0)
    for tid, (kind, seconds) in after["threads"].items():
        split[kind] += seconds - before["threads"].get(tid, (kind, 0.0))[1]
    split["other"] += (after["total"] - before["total"]) - sum(split.values())
    return {k: round(max(0.0, v), 1) for k, v in split.items()}


def _jobs_so_far(session: Any) -> int | None:
    """Spark jobs submitted in this session so far (the DAG scheduler's next job id); None if unknown."""
    try:
        return int(session.sparkContext._jsc.sc().dagScheduler().nextJobId())
    except Exception:  # a private field: best effort
        return None


def _processes_started() -> int | None:
    """Processes this machine has started since boot (Linux ``/proc/stat``); None elsewhere."""
    try:
        with open("/proc/stat") as stat:
            for line in stat:
                if line.startswith("processes "):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


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


def _run_backlog_pipeline(session: Any, spec: dict[str, Any], name: str, base: Path) -> Any:
    """Run a MERGE contender's pipeline (this checkout's or the baseline's) over the backlog,
    available-now, into tables under ``base``; its ``PipelineResult``."""
    from prometheus_client import CollectorRegistry

    with _pipeline(session, name) as pipeline:
        dv = {"deletion_vectors": True} if name == MERGE_DV else {}
        return pipeline.run_pipeline(
            pipeline.PipelineSettings(
                bootstrap=spec["bootstrap"],
                warehouse=str(base),
                checkpoint=str(base) + "-checkpoint",
                topic=spec["topic"],
                max_offsets_per_trigger=spec["max_offsets_per_trigger"] or None,
                compact_every=0,
                master="local[2]",
                **dv,
            ),
            spark=session,
            metrics=pipeline.PipelineMetrics.create(CollectorRegistry()),
        )


def _floor(session: Any, spec: dict[str, Any], base: Path) -> int:
    """The ``floor`` contender over the backlog, available-now (module docstring); its batches.

    Everything that makes the pipeline's own writes cheaper applies to it too: the same tables
    (``ensure_tables``: schemas, statistics on the key columns only), the same settings of the
    batch's session (``BATCH_CONF``) and the same fork-free checkpoint file manager."""
    from datetime import UTC, datetime

    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from laneway.spark import schema
    from laneway.spark.batch import BATCH_CONF, _cores
    from laneway.spark.merge import _run_concurrently
    from laneway.spark.parse import _latest, _parse
    from laneway.spark.pipeline import _stream
    from laneway.spark.settings import (
        _CHECKPOINT_FILE_MANAGER,
        _LOCAL_CHECKPOINT_FILE_MANAGER,
        PipelineSettings,
    )
    from laneway.spark.tables import ensure_tables

    paths = {t: schema.table_path(base, t) for t in schema.TABLES}
    ensure_tables(session, str(base))
    batches = []

    def write(df: Any, batch_id: int) -> None:
        spark = df.sparkSession
        for key, value in BATCH_CONF.items():
            spark.conf.set(key, value)
        spark.conf.set(_CHECKPOINT_FILE_MANAGER, _LOCAL_CHECKPOINT_FILE_MANAGER)
        parsed = (
            _parse(df, datetime.now(UTC))
            .repartition(_cores(spark), F.col("entity_id"))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        parsed.count()
        valid = parsed.where(F.col("reason").isNull()).select(
            *(name for name, _ in schema.RECORD_FIELDS), "kafka_partition", "kafka_offset", "landed_at"
        )
        latest = _latest(valid).persist(StorageLevel.MEMORY_AND_DISK)
        edges = latest.where(
            (F.col("entity_type") == "lineage")
            & ~F.col("deleted")
            & F.col("source_id").isNotNull()
            & F.col("target_id").isNotNull()
        ).select(
            F.col("entity_id").alias("edge_id"),
            *("source_id", "target_id", "description", "attributes", "version", "event_time_ms", "landed_at"),
        )
        writes = {
            "history": (valid, schema.ENTITY_HISTORY),
            "entities": (latest, schema.ENTITIES),
            "lineage": (edges, schema.LINEAGE_EDGES),
        }
        try:
            _run_concurrently(
                spark,
                {
                    name: functools.partial(rows.write.format("delta").mode("append").save, paths[table])
                    for name, (rows, table) in writes.items()
                },
            )
        finally:
            latest.unpersist()
            parsed.unpersist()
        batches.append(batch_id)

    # started as the pipeline starts its own query: its source options, trigger, checkpoint manager
    settings = PipelineSettings(
        bootstrap=spec["bootstrap"],
        warehouse=str(base),
        checkpoint=str(base) + "-checkpoint",
        topic=spec["topic"],
        max_offsets_per_trigger=spec["max_offsets_per_trigger"] or None,
    )
    query = _stream(session, settings, write)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return len(batches)


def _warm_up(session: Any, spec: dict[str, Any], name: str, base: Path) -> None:
    """Run ``name`` once over the topic, untimed.

    A fresh JVM runs its first queries interpreted and loads and compiles as it goes: the
    first MERGE run over the 30k backlog took 40-57 s here, the next ones 24-30 s (a 2k-record
    warm-up was not enough: the big batches take other code paths). Without this the
    contender timed first paid for the whole JVM warm-up alone.
    """

    if name == FLOOR:
        _floor(session, spec, base)
    elif name not in APPENDS:
        _run_backlog_pipeline(session, spec, name, base)
    else:
        _append(session, spec, str(base / "raw"), str(base) + "-checkpoint", options=_source_options(name))
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(str(base) + "-checkpoint", ignore_errors=True)


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


def _median(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs) if xs else 0.0


def _batch_times(runs: list[dict[str, Any]]) -> str:
    """Median and longest batch time over ``runs``: the pipeline's own batch times, or an
    append's wall time per batch (it does not time its batches)."""
    times = [t for r in runs for t in r.get("batch_s", [])]
    if times:
        return f"{_median(times):.2f} / {max(times):.2f}"
    per = [r["wall_s"] / r["batches"] for r in runs if r.get("batches")]
    return f"{_median(per):.2f} (wall / batches)" if per else "-"


def sweep(
    bootstrap: str,
    sizes: list[tuple[int, int, int]],
    repeats: int,
    *,
    floor: bool = False,
    deletion_vectors: bool = False,
    only: frozenset[str] | None = None,
) -> dict[str, Any]:
    """The backlog runs at several sizes in one session (``python -m bench.spark_bench sweep``).

    Each size is (records, entities, maxOffsetsPerTrigger), on its own pre-produced topic.
    Each contender is warmed up once on the first size; then, per size, ``repeats`` timed
    runs of each, in an order rotated per repeat. No live phase.
    """
    from bench.kafka_io import Kafka
    from laneway.spark.session import SessionSettings, build_session

    kafka = Kafka(bootstrap)
    waited = kafka.wait_for_groups()
    print(f"the broker's group coordinator answers (waited {waited:.1f} s)", flush=True)
    specs = []
    topics: dict[tuple[int, int], tuple[str, dict[str, int]]] = {}
    for n, entities, per_trigger in sizes:
        if (n, entities) not in topics:  # sizes differing in batch size only share a topic
            topic = kafka.topic(f"spark-sweep-{n}", 8)
            topics[n, entities] = topic, produce_entities(bootstrap, topic, n, entities)
            ids = len(topics[n, entities][1])
            print(f"produced {n:,} records over {ids:,} entities on {topic}", flush=True)
        topic, versions = topics[n, entities]
        specs.append(_backlog_spec(bootstrap, topic, n, versions, per_trigger))
    # LANEWAY_BENCH_SPARK_CONF="key=value,key=value": Spark settings for a run, to measure one
    conf = dict(kv.split("=", 1) for kv in os.environ.get("LANEWAY_BENCH_SPARK_CONF", "").split(",") if kv)
    session = build_session(SessionSettings(master="local[2]", app_name="laneway-bench-sweep", conf=conf))
    work = Path(tempfile.mkdtemp(prefix="laneway-bench-sweep-"))
    names = [*contenders(), *([MERGE_DV] if deletion_vectors else []), *([FLOOR] if floor else [])]
    names = [n for n in names if only is None or n in only]
    out: dict[str, Any] = {"sizes": [], "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    try:
        for name in names:
            _warm_up(session, specs[0], name, work / f"warmup-{name}")
        for spec in specs:
            runs = []
            for rep in range(repeats):
                for name in names if rep % 2 == 0 else names[::-1]:
                    r = _backlog_run(session, spec, name, work / f"{name}-{rep}", rep)
                    r["load_1min"] = os.getloadavg()[0]
                    runs.append(r)
                    size = f"{spec['records']:,} / {spec['max_offsets_per_trigger']:,}"
                    verdict = "ok" if not r["notes"] else "FAIL " + "; ".join(r["notes"])
                    split = r.get("jvm_cpu_s")
                    jvm = " ".join(f"{k} {v:.1f}" for k, v in split.items()) if split else "-"
                    print(
                        f"{size:>18}  {name:<12} rep {rep}  {r['rate']:>7,.0f} rec/s  "
                        f"wall {r['wall_s']:5.1f}s  cpu {r['cpu_s']:5.1f}s  batches {r['batches']}  "
                        f"files {r.get('files', '-')}  "
                        f"batch s {' '.join(f'{b:.1f}' for b in r.get('batch_s', []))}  "
                        f"jobs {r.get('spark_jobs', '-')}  forks {r.get('processes_started', '-')}  "
                        f"load {r['load_1min']:.1f}  JVM cpu s: {jvm}  {verdict}",
                        flush=True,
                    )
            out["sizes"].append(
                {k: spec[k] for k in ("records", "entities", "max_offsets_per_trigger")} | {"runs": runs}
            )
    finally:
        session.stop()
        shutil.rmtree(work, ignore_errors=True)
        kafka.delete_all()
    print(
        "\n| records | entities | per trigger | contender | records/s (median) | ÷ append | ÷ append-tuned "
        "| wall s | CPU s "
        "| JVM CPU s: tasks / JIT / GC / other | batches | batch s (median / max) | table files "
        "| jobs per batch | processes started per batch | runs (rec/s) | correct |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for size in out["sizes"]:
        by: dict[str, list[dict[str, Any]]] = {}
        for r in size["runs"]:
            by.setdefault(r["pipeline"], []).append(r)
        bases = [_median([r["rate"] for r in by.get(a, [])]) for a in APPENDS]
        for name, rs in by.items():
            rate = _median([r["rate"] for r in rs])
            jobs = [r["spark_jobs"] / r["batches"] for r in rs if r.get("spark_jobs") and r["batches"]]
            forks = [
                r["processes_started"] / r["batches"] for r in rs if "processes_started" in r and r["batches"]
            ]
            cells = [
                f"{size['records']:,}",
                f"{size['entities']:,}",
                f"{size['max_offsets_per_trigger']:,}",
                name,
                f"{rate:,.0f}",
                *(f"{rate / base:.2f}" if base else "-" for base in bases),
                f"{_median([r['wall_s'] for r in rs]):.1f}",
                f"{_median([r['cpu_s'] for r in rs]):.0f}",
                " / ".join(
                    f"{_median([r['jvm_cpu_s'][k] for r in rs if r.get('jvm_cpu_s')]):.1f}"
                    for k in ("tasks", "jit", "gc", "other")
                ),
                f"{_median([r['batches'] for r in rs]):.0f}",
                _batch_times(rs),
                f"{_median([r['files'] for r in rs if 'files' in r]):.0f}",
                f"{_median(jobs):.1f}",
                f"{_median(forks):.0f}",
                " / ".join(f"{r['rate']:,.0f}" for r in rs),
                f"{'ok' if not any(r['notes'] for r in rs) else 'FAIL'} ({len(rs)})",
            ]
            print("| " + " | ".join(cells) + " |")
    return out


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


def _sweep_main(argv: list[str]) -> int:
    parser = cli(
        "bench.spark_bench sweep", "The Spark backlog runs at several sizes, side by side in one session."
    )
    parser.add_argument(
        "sizes",
        nargs="+",
        help="RECORDS/ENTITIES/PER_TRIGGER, e.g. 150000/15000/50000 or 5000000/5000000/250000 "
        "(the catalog scale); PER_TRIGGER 0: no limit, one batch per run",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    parser.add_argument(
        "--floor", action="store_true", help="add the floor contender (three blind appends: module docstring)"
    )
    parser.add_argument(
        "--deletion-vectors",
        action="store_true",
        help="add merge-dv: the pipeline with deletion_vectors=True, side by side with merge",
    )
    parser.add_argument("--only", help="comma-separated: run just these contenders")
    args = parse(parser, argv)
    sizes = [tuple(int(x) for x in size.split("/")) for size in args.sizes]
    if any(len(size) != 3 for size in sizes):
        parser.error("each size is RECORDS/ENTITIES/PER_TRIGGER")
    only = frozenset(n.strip() for n in args.only.split(",")) if args.only else None
    out = sweep(
        args.bootstrap,
        sizes,  # type: ignore[arg-type]
        args.repeats,
        floor=args.floor,
        deletion_vectors=args.deletion_vectors,
        only=only,
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0 if all(not r["notes"] for size in out["sizes"] for r in size["runs"]) else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["sweep"]:
        return _sweep_main(argv[1:])
    if len(argv) != 2 or argv[0].startswith("-"):
        print(
            "usage: python -m bench.spark_bench sweep RECORDS/ENTITIES/PER_TRIGGER ... [options]\n"
            "       (python -m bench.spark_bench sweep --help lists the options; the harness runs\n"
            "       one contender as: python -m bench.spark_bench SPEC.json RESULT.json)",
            file=sys.stderr,
        )
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
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
