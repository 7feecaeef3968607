"""``python -m bench.spark_bench sweep``: the backlog runs at several sizes, side by side in one
session, and their table."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.spark_child import _backlog_run
from bench.spark_common import (
    APPENDS,
    FLOOR,
    MERGE_DV,
    _backlog_spec,
    cli,
    contenders,
    parse,
    produce_entities,
)
from bench.spark_contenders import _warm_up


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
