"""show, search and lineage over the landed tables, as functions and as CLI commands."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from laneway.ops.spark_cli import add_query_commands
from laneway.spark.queries import lineage, search_entities, show_entity
from tests.spark.conftest import Landed
from tests.spark.entities import expected_entities

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def test_show_entity(spark: Any, landed: Landed) -> None:
    expected = expected_entities(landed.topic.records)
    table = show_entity(spark, landed.warehouse, "table:db0.t0")
    assert table is not None
    assert table["version"] == expected["table:db0.t0"]["version"] and table["deleted"] is False
    live_columns = sorted(
        k for k, r in expected.items() if r["parent_id"] == "table:db0.t0" and not r["deleted"]
    )
    assert [c["entity_id"] for c in table["children"]] == live_columns
    versions = [h["version"] for h in table["history"]]
    assert versions == sorted(
        {r["version"] for r in landed.topic.records if r["entity_id"] == "table:db0.t0"}
    )

    by_name = show_entity(spark, landed.warehouse, "db0.t0")  # a qualified name
    assert by_name is not None and by_name["entity_id"] == "table:db0.t0"
    deleted = show_entity(spark, landed.warehouse, "table:db1.t2")
    assert deleted is not None and deleted["deleted"] is True and deleted["op"] == "delete"
    assert show_entity(spark, landed.warehouse, "table:nope.nope") is None


def test_search_entities(spark: Any, landed: Landed) -> None:
    found = search_entities(spark, landed.warehouse, "T0")
    ids = [r["entity_id"] for r in found]
    assert ids[:2] == ["table:db0.t0", "table:db1.t0"]  # exact name first
    assert all(not r["deleted"] for r in found)
    assert all(
        r["entity_type"] == "column"
        for r in search_entities(spark, landed.warehouse, "t0", entity_type="column")
    )
    assert len(search_entities(spark, landed.warehouse, "db", limit=3)) == 3
    assert search_entities(spark, landed.warehouse, "no such thing") == []


def test_lineage(spark: Any, landed: Landed) -> None:
    one = lineage(spark, landed.warehouse, "db0.t1", depth=1)
    assert one["table"] == "table:db0.t1" and one["known"] is True
    assert lineage(spark, landed.warehouse, "nope.nothing")["known"] is False
    assert [e["source_id"] for e in one["upstream"]] == ["table:db0.t0"]
    assert one["downstream"] == []  # db0.t1 -> db0.t2 was deleted

    deep = lineage(spark, landed.warehouse, "table:db0.t0", depth=3, direction="downstream")
    reached = {(e["target_id"], e["depth"]) for e in deep["downstream"]}
    # db0.t0 -> db0.t1, db0.t0 -> db0.t2 (re-created edge); db0.t2 -> db1.t0; db1.t0 -> db1.t1
    assert reached == {("table:db0.t1", 1), ("table:db0.t2", 1), ("table:db1.t0", 2), ("table:db1.t1", 3)}
    assert deep["upstream"] == []
    with pytest.raises(ValueError):
        lineage(spark, landed.warehouse, "db0.t0", depth=0)


def test_query_commands(spark: Any, landed: Landed) -> None:
    catalog_app = typer.Typer()
    add_query_commands(catalog_app)
    runner = CliRunner()
    wh = ["--warehouse", landed.warehouse]
    shown = runner.invoke(catalog_app, ["show", "table:db0.t0", *wh, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["entity_id"] == "table:db0.t0"
    text = runner.invoke(catalog_app, ["show", "table:db0.t0", *wh])
    assert text.exit_code == 0 and "history: v1" in text.stdout
    assert runner.invoke(catalog_app, ["show", "table:x.y", *wh]).exit_code == 2
    searched = runner.invoke(catalog_app, ["search", "t0", *wh, "--type", "table"])
    assert searched.exit_code == 0 and searched.stdout.splitlines()[0].startswith("table:db0.t0")
    lin = runner.invoke(catalog_app, ["lineage", "db0.t1", *wh, "--depth", "2", "--json"])
    assert lin.exit_code == 0, lin.output
    assert json.loads(lin.stdout)["upstream"][0]["source_id"] == "table:db0.t0"
    unknown = runner.invoke(catalog_app, ["lineage", "nope.nothing", *wh])
    assert unknown.exit_code == 2 and "table:nope.nothing" in unknown.stderr


@pytest.mark.parametrize("command", [["show", "table:x.y"], ["search", "x"], ["lineage", "x.y"]])
def test_a_warehouse_without_the_tables_fails_before_spark_starts(command: list[str], tmp_path: Path) -> None:
    catalog_app = typer.Typer()
    add_query_commands(catalog_app)
    started = time.monotonic()
    result = CliRunner().invoke(catalog_app, [*command, "--warehouse", str(tmp_path / "nowhere")])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no catalog tables in" in lines[0] and "nowhere" in lines[0]
    assert "Traceback" not in result.output
    assert time.monotonic() - started < 5  # no Spark session was started for it


def test_a_query_command_prints_its_answer_without_start_up_noise(landed: Landed, tmp_path: Path) -> None:
    """A query command in a new process, run from an empty folder: the answer on stdout, nothing
    on stderr but the JVM's own lines, and no ./spark-warehouse left behind (it printed five of
    Spark's start-up warnings and left the folder wherever it ran)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "laneway.ops.cli", "catalog", "show", "table:db0.t0",
         "--warehouse", landed.warehouse, "--master", "local[1]", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["entity_id"] == "table:db0.t0"
    noise = [
        line
        for line in done.stderr.splitlines()
        if line.strip() and not line.startswith(("WARNING: Using incubator modules", "Picked up "))
    ]
    assert noise == []
    assert not (tmp_path / "spark-warehouse").exists()
