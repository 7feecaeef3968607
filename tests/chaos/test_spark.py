"""Spark pipeline faults: the streaming job killed mid-batch and restarted; a corrupt checkpoint
detected with a clear error, and the documented recovery (a new checkpoint replaying from the
earliest offsets; the MERGEs are idempotent) lands exactly the expected tables."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.chaos.support import LONG, create_topics, wait_for

pytest.importorskip("pyspark")
from tests.spark.entities import MALFORMED, catalog_stream, expected_entities, produce

# a JVM per job on two shared cores: minutes, so the Spark faults are in the long form only
pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(not LONG, reason="long form only (LANEWAY_CHAOS=long): each job starts a JVM"),
]


def _ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


def _expected(records: list[dict[str, Any]]) -> dict[str, Any]:
    from laneway.spark import schema

    fields = [name for name, _ in schema.RECORD_FIELDS]
    state = {k: {f: r.get(f) for f in [*fields, "deleted"]} for k, r in expected_entities(records).items()}
    return json.loads(json.dumps(state, default=str))


def _job(tmp_path: Path, args: dict[str, Any], name: str) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    with (tmp_path / f"{name}.log").open("w") as log:
        run = subprocess.run(
            [sys.executable, "-m", "tests.chaos.spark_job", json.dumps({**args, "out": str(out)})],
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=1100,
            check=False,
        )
    assert run.returncode == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _check_tables(
    tables: dict[str, Any], expected: dict[str, Any], distinct: set[tuple[str, int]], bad: int
) -> None:
    assert tables["entities"] == expected  # every entity at its newest version, nothing else
    history = [tuple(x) for x in tables["history"]]
    assert len(history) == len(set(history)), "a (entity_id, version) landed twice"
    assert set(history) == distinct  # every valid record's change landed once
    assert tables["quarantine"] == bad


def _topic(bootstrap: str, admin: AdminClient, records: list[dict[str, Any]], bad: int) -> str:
    name = f"chaos-entities-{uuid.uuid4().hex[:12]}"
    create_topics(admin, {name: 3})
    produce(bootstrap, name, records, MALFORMED[:bad])
    return name


def _assert_clear(entry: dict[str, Any], checkpoint: Path) -> None:
    message = entry.get("message") or ""
    assert entry["error"] is not None, f"a corrupt checkpoint ({entry['damaged']}) was not detected"
    assert entry["error"].startswith("laneway."), f"a raw {entry['error']} escaped: {message[:300]}"
    first = message.splitlines()[0] if message else ""
    # names the checkpoint directory and says, in words, that the checkpoint is what failed
    assert str(checkpoint) in first, f"the error does not name the checkpoint: {first[:500]}"
    words = first.replace(str(checkpoint), "<dir>").lower()
    assert "checkpoint" in words, f"the error does not say the checkpoint is damaged: {first[:500]}"


def test_streaming_job_killed_mid_batch_then_restarted_and_corrupt_checkpoint(
    kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path
) -> None:
    records = catalog_stream(seed=13)
    topic = _topic(kafka_bootstrap, kafka_admin, records, bad=2)
    distinct = {(r["entity_id"], r["version"]) for r in records}
    warehouse, checkpoint = tmp_path / "warehouse", tmp_path / "checkpoint"
    args = [
        *(sys.executable, "-m", "laneway.ops.cli", "pipeline", "run", "--master", "local[1]"),
        *("--bootstrap", kafka_bootstrap, "--topic", topic, "--warehouse", str(warehouse)),
        *("--checkpoint", str(checkpoint), "--trigger", "500ms", "--max-offsets-per-trigger", "10"),
        *(
            "--compact-every",
            "0",
            "--conf",
            "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        ),
    ]
    with (tmp_path / "streaming.log").open("w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # mid-batch: batch N's offsets are logged (planned) and its commit is not (being applied)
        def mid_batch() -> bool:
            assert proc.poll() is None, (tmp_path / "streaming.log").read_text()[-3000:]
            commits, offsets = _ids(checkpoint / "commits"), _ids(checkpoint / "offsets")
            return len(commits) >= 1 and bool(offsets) and offsets[-1] > commits[-1]

        wait_for(mid_batch, 900, "a batch in progress after the first commit", interval=0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM
        proc.wait()
    commits, offsets = _ids(checkpoint / "commits"), _ids(checkpoint / "offsets")
    assert offsets[-1] > commits[-1], "not killed mid-batch"

    out = _job(
        tmp_path,
        {
            "bootstrap": kafka_bootstrap,
            "topic": topic,
            "warehouse": str(warehouse),
            "checkpoint": str(checkpoint),
            "steps": ["resume", "corrupt", "recover"],
            "corruption": "offsets",
        },
        "restart",
    )
    expected = _expected(records)
    print(
        f"killed in batch {offsets[-1]} (last commit {commits[-1]}); "
        f"resumed in {out['resume']['batches']} batches"
    )
    _check_tables(out["resume"]["tables"], expected, distinct, bad=2)
    _assert_clear(out["corrupt"], checkpoint)
    _check_tables(out["corrupt"]["tables"], expected, distinct, bad=2)  # nothing half-applied
    _check_tables(out["recover"]["tables"], expected, distinct, bad=2)  # replay from offsets: same tables


@pytest.mark.parametrize("corruption", ["metadata", "commits"])
def test_checkpoint_missing_files(
    kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path, corruption: str
) -> None:
    """A checkpoint with a file missing: either a clear error, or a run that still lands exactly
    the expected tables (Spark re-plans from the offset log); never a silent loss or a double write."""
    records = catalog_stream(seed=17)
    topic = _topic(kafka_bootstrap, kafka_admin, records, bad=1)
    distinct = {(r["entity_id"], r["version"]) for r in records}
    checkpoint = tmp_path / "checkpoint"
    args = {
        "bootstrap": kafka_bootstrap,
        "topic": topic,
        "warehouse": str(tmp_path / "warehouse"),
        "checkpoint": str(checkpoint),
        "steps": ["resume", "corrupt", "recover"],
        "corruption": corruption,
    }
    out = _job(tmp_path, args, corruption)
    expected = _expected(records)
    _check_tables(out["resume"]["tables"], expected, distinct, bad=1)
    if out["corrupt"]["error"] is not None:
        _assert_clear(out["corrupt"], checkpoint)
    _check_tables(out["corrupt"]["tables"], expected, distinct, bad=1)
    _check_tables(out["recover"]["tables"], expected, distinct, bad=1)
