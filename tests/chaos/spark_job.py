"""The Spark side of the chaos suite, in a process of its own (one JVM):
``python -m tests.chaos.spark_job '<json>'`` with keys bootstrap, topic, warehouse, checkpoint,
out, and steps, any of:

* ``resume``: run the pipeline (available-now) on ``checkpoint``, then record the tables;
* ``corrupt``: damage ``checkpoint`` (``corruption``: ``offsets``, ``metadata`` or ``commits``), run
  again, record the error (type and message) or that none came;
* ``recover``: the documented recovery: a new checkpoint with ``starting_offsets="earliest"``
  (replay from offsets; the MERGEs are idempotent), then record the tables.

The results go to ``out`` as JSON.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from laneway.spark import schema
from laneway.spark.pipeline import run_pipeline
from laneway.spark.session import SessionSettings, build_session
from laneway.spark.settings import PipelineSettings

CONTRACT = [name for name, _ in schema.RECORD_FIELDS]


def tables(spark: Any, warehouse: str) -> dict[str, Any]:
    def rows(table: schema.TableName) -> list[dict[str, Any]]:
        path = schema.table_path(warehouse, table)
        return [r.asDict(recursive=True) for r in spark.read.format("delta").load(path).collect()]

    entities = {r["entity_id"]: {k: r[k] for k in [*CONTRACT, "deleted"]} for r in rows(schema.ENTITIES)}
    history = sorted([r["entity_id"], r["version"]] for r in rows(schema.ENTITY_HISTORY))
    return {"entities": entities, "history": history, "quarantine": len(rows(schema.QUARANTINE))}


def corrupt(checkpoint: Path, how: str) -> str:
    """Damage the checkpoint the way a full disk, a bad copy or a partial restore would."""
    if how == "offsets":  # the newest offset log entry is garbage (a torn write)
        last = max(
            (p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
        )
        last.write_bytes(b"\x00\x17garbage{not an offset log")
        return str(last)
    if how == "metadata":  # the query id file is gone (a partial copy)
        (checkpoint / "metadata").unlink()
        return str(checkpoint / "metadata")
    if how == "commits":  # the commit log directory is gone but the offsets remain
        shutil.rmtree(checkpoint / "commits")
        return str(checkpoint / "commits")
    raise ValueError(how)


def main() -> None:
    args = json.loads(sys.argv[1])
    spark = build_session(
        SessionSettings(
            master="local[1]",
            app_name="laneway-chaos",
            shuffle_partitions=2,
            conf={"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"},
        )
    )
    out: dict[str, Any] = {}

    def settings(checkpoint: str, **kw: Any) -> PipelineSettings:
        return PipelineSettings(
            bootstrap=args["bootstrap"],
            topic=args["topic"],
            warehouse=args["warehouse"],
            checkpoint=checkpoint,
            compact_every=0,
            **kw,
        )

    try:
        for step in args["steps"]:
            if step == "resume":
                result = run_pipeline(settings(args["checkpoint"]), spark)
                out["resume"] = {"batches": len(result.batches), "tables": tables(spark, args["warehouse"])}
            elif step == "corrupt":
                damaged = corrupt(Path(args["checkpoint"]), args["corruption"])
                entry: dict[str, Any] = {"damaged": damaged}
                try:
                    result = run_pipeline(settings(args["checkpoint"]), spark)
                    entry["error"] = None
                    entry["batches"] = len(result.batches)
                except Exception as exc:
                    entry["error"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
                    entry["message"] = str(exc)
                entry["tables"] = tables(spark, args["warehouse"])
                out["corrupt"] = entry
            elif step == "recover":
                fresh = args["checkpoint"] + ".recovered"
                result = run_pipeline(settings(fresh, starting_offsets="earliest"), spark)
                out["recover"] = {"batches": len(result.batches), "tables": tables(spark, args["warehouse"])}
    finally:
        Path(args["out"]).write_text(json.dumps(out, default=str))
        spark.stop()


if __name__ == "__main__":
    main()
