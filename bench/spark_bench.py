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

The harness side (``bench.spark_harness``) produces the topic; ``python -m bench.spark_bench
SPEC RESULT`` runs the Spark side in its own process (``bench.spark_child``). The contenders' runs
are in ``bench.spark_contenders``, the baseline checkout's pipeline in ``bench.spark_checkout``,
the CPU readings in ``bench.spark_cpu``, the sweep in ``bench.spark_sweep``, what the Spark
commands share in ``bench.spark_common``; this module is the command line.

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

import json
import sys
import traceback
from pathlib import Path

from bench.spark_child import child
from bench.spark_sweep import _sweep_main

__all__ = ["main"]


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
