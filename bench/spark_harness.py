"""The harness side of the ``spark`` scenario of ``python -m bench`` (``run_spark``).

It produces the topic, runs the Spark side in its own process (``python -m bench.spark_bench
SPEC RESULT``: ``bench.spark_child``) and returns that process's results.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.spark_common import BASELINE_ENV, LIVE_TRIGGER, _backlog_spec, contenders, produce_entities

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
