"""The pipeline and the catalog queries on a Spark standalone cluster, as a user's cluster runs them:
a master and two workers started from the installed pyspark (``laneway.spark.cluster``), each its
own JVM on 127.0.0.1, and executor JVMs the workers start, which get the Kafka and Delta jars
through ``spark.jars``. The driver is one subprocess that runs ``laneway pipeline run --master
spark://...``, then the ``laneway catalog`` commands: the pipeline stops its session when it is
done, so the queries' session is a second application on the cluster, with executors of its own.

The tables are compared with the expected state computed without Spark, and each worker's
executor folder must show that it fetched the jars and ran tasks. A relative warehouse with a
cluster master is refused before Spark starts, with one line naming the setting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from laneway.jars import DELTA_VERSION, SPARK_VERSION
from laneway.spark import schema
from laneway.spark.cluster import StandaloneCluster
from tests.spark.conftest import (
    TEST_JVM_OPTIONS,
    CatalogTopic,
    entity_state,
    expected_state,
    history_keys,
    read_table,
)
from tests.spark.entities import MALFORMED, expected_entities

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

_CONF = [
    *("--conf", f"spark.driver.extraJavaOptions={TEST_JVM_OPTIONS}"),
    *("--conf", f"spark.executor.extraJavaOptions={TEST_JVM_OPTIONS}"),
    *("--conf", "spark.executor.memory=512m"),
]

# the pipeline, then show, search and lineage, through the `laneway` command line in one driver
# process (each catalog command's session is the process's one: a new driver per command would
# start new executors; the pipeline's own session ends with it)
_DRIVER = """
import json, sys
from pyspark.sql import SparkSession
from typer.testing import CliRunner
from laneway.ops.cli import _register_subcommands, app
_register_subcommands()  # what `laneway` does before it parses its arguments
master, bootstrap, topic, warehouse, out, *conf = sys.argv[1:]
found = {}
def run(name, args):
    done = CliRunner().invoke(app, [*args, "--master", master, *conf])
    found[name] = {"code": done.exit_code, "stdout": done.stdout, "stderr": done.stderr,
                   "error": repr(done.exception) if done.exit_code else None}
    return done.exit_code == 0
pipeline = ["pipeline", "run", "--bootstrap", bootstrap, "--topic", topic, "--warehouse", warehouse,
            "--compact-every", "0"]
if run("pipeline", pipeline):
    commands = {
        "show": ["show", "table:db0.t0"],
        "search": ["search", "T0"],
        "lineage": ["lineage", "db0.t0", "--depth", "3", "--direction", "downstream"],
    }
    for name, args in commands.items():
        run(name, ["catalog", *args, "--warehouse", warehouse, "--json"])
    found["master"] = SparkSession.getActiveSession().sparkContext.master
open(out, "w").write(json.dumps(found))
"""


@dataclass(frozen=True)
class ClusterRun:
    cluster: StandaloneCluster
    warehouse: Path
    proc: subprocess.CompletedProcess[str]
    #: per command (pipeline, show, search, lineage): its exit code, stdout, stderr; and the
    #: master the queries' session ran on
    found: dict[str, Any]

    def ran(self, name: str) -> dict[str, Any]:
        assert self.proc.returncode == 0, self.proc.stderr[-4000:]
        assert name in self.found, (self.found.get("pipeline"), self.proc.stderr[-4000:])
        assert self.found[name]["code"] == 0, (self.found[name], self.proc.stderr[-4000:])
        return dict(self.found[name])


def _env() -> dict[str, str]:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}  # the driver on loopback, as the cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    root = tmp_path_factory.mktemp("standalone")
    with StandaloneCluster(root, workers=2, cores=1, memory="1g", java_options=TEST_JVM_OPTIONS) as c:
        yield c


@pytest.fixture(scope="module")
def cluster_run(
    cluster: StandaloneCluster, kafka_bootstrap: str, catalog_topic: CatalogTopic, tmp_path_factory: Any
) -> ClusterRun:
    root = tmp_path_factory.mktemp("cluster-run")
    warehouse, out = root / "warehouse", root / "found.json"
    args = [
        *(sys.executable, "-c", _DRIVER, cluster.master_url, kafka_bootstrap, catalog_topic.topic),
        *(str(warehouse), str(out), *_CONF),
    ]
    proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=500, env=_env())
    found = json.loads(out.read_text()) if out.exists() else {}
    return ClusterRun(cluster, warehouse, proc, found)


def _executor_dirs(cluster: StandaloneCluster, app_name: str) -> list[Path]:
    """The executor folders of the finished application ``app_name``, one list across workers
    (the master lists it as completed once its driver has gone)."""
    deadline = time.monotonic() + 30
    while True:
        state = cluster.state() or {}
        ids = [a["id"] for a in state.get("completedapps", []) if a.get("name") == app_name]
        if ids or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(ids) == 1, state.get("completedapps")
    return sorted(cluster.root.glob(f"worker-*/{ids[0]}/*"))


def test_pipeline_on_standalone_cluster(
    spark: Any, cluster_run: ClusterRun, catalog_topic: CatalogTopic
) -> None:
    ran = cluster_run.ran("pipeline")
    records = catalog_topic.records
    assert f"{len(records)} records, {len(MALFORMED)} quarantined" in ran["stdout"]
    warehouse = cluster_run.warehouse
    assert entity_state(spark, warehouse) == expected_state(records)
    keys = history_keys(spark, warehouse)
    assert sorted(keys) == sorted({(r["entity_id"], r["version"]) for r in records})
    assert len(read_table(spark, warehouse, schema.QUARANTINE)) == len(MALFORMED)

    # one executor per worker, each fetched the connector and Delta from the driver and ran tasks
    executors = _executor_dirs(cluster_run.cluster, "laneway-pipeline")
    assert sorted(p.parent.parent.name for p in executors) == ["worker-0", "worker-1"]
    for folder in executors:
        fetched = {p.name for p in folder.glob("*.jar")}
        wanted = {f"delta-spark_2.13-{DELTA_VERSION}.jar", f"spark-sql-kafka-0-10_2.13-{SPARK_VERSION}.jar"}
        assert wanted <= fetched, folder
        assert "Running task" in (folder / "stderr").read_text(errors="replace"), folder


def test_catalog_queries_on_standalone_cluster(cluster_run: ClusterRun, catalog_topic: CatalogTopic) -> None:
    cluster = cluster_run.cluster
    found = {name: cluster_run.ran(name) for name in ("pipeline", "show", "search", "lineage")}
    assert cluster_run.found["master"] == cluster.master_url

    expected = expected_entities(catalog_topic.records)
    shown = json.loads(found["show"]["stdout"])
    assert (shown["entity_id"], shown["version"]) == ("table:db0.t0", expected["table:db0.t0"]["version"])
    live_columns = sorted(
        k for k, r in expected.items() if r["parent_id"] == "table:db0.t0" and not r["deleted"]
    )
    assert [c["entity_id"] for c in shown["children"]] == live_columns
    searched = [r["entity_id"] for r in json.loads(found["search"]["stdout"])]
    assert searched[:2] == ["table:db0.t0", "table:db1.t0"]  # exact name first
    assert all(not expected[e]["deleted"] for e in searched)
    reached = {(e["target_id"], e["depth"]) for e in json.loads(found["lineage"]["stdout"])["downstream"]}
    assert reached == {("table:db0.t1", 1), ("table:db0.t2", 1), ("table:db1.t0", 2), ("table:db1.t1", 3)}
    assert len(_executor_dirs(cluster, "laneway-catalog")) == 2  # the queries ran on both workers


@pytest.mark.parametrize(
    "command",
    [
        ["pipeline", "run", "--bootstrap", "127.0.0.1:1", "--warehouse", "warehouse"],
        ["pipeline", "run", "--bootstrap", "127.0.0.1:1", "--warehouse", "/w", "--checkpoint", "cp"],
        ["catalog", "show", "table:db0.t0", "--warehouse", "warehouse"],
    ],
)
def test_a_relative_path_on_a_cluster_fails_with_one_line(
    cluster: StandaloneCluster, command: list[str], tmp_path: Path
) -> None:
    args = [sys.executable, "-m", "laneway.ops.cli", *command, "--master", cluster.master_url]
    proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    field = "checkpoint" if "--checkpoint" in command else "warehouse"
    assert f"{field}: with" in lines[0] and "absolute path" in lines[0]
    assert (cluster.state() or {}).get("activeapps") == []  # refused before Spark started
