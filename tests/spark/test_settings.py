"""Settings, jar selection and freshness arithmetic: no Spark, no broker."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from laneway.errors import ConfigError
from laneway.spark import batch, metrics, pipeline, schema
from laneway.spark.session import LOG4J2, SessionSettings, extra_jars
from laneway.spark.settings import (
    AVAILABLE_NOW,
    DEFAULT_MAX_OFFSETS_PER_TRIGGER,
    PipelineSettings,
    local_master,
    shared_path_problem,
)


def _settings(**kw: object) -> PipelineSettings:
    base: dict[str, object] = {"bootstrap": "b:9092", "warehouse": "/w", "checkpoint": "/c"}
    return PipelineSettings(**{**base, **kw})  # type: ignore[arg-type]


def test_defaults_and_pickling() -> None:
    s = _settings()
    assert s.topic == "catalog.entities" and s.trigger == AVAILABLE_NOW and s.trigger_interval_ms is None
    assert pickle.loads(pickle.dumps(s)) == s
    session = SessionSettings(master="local[2]", conf={"spark.x": "1"})
    assert pickle.loads(pickle.dumps(session)) == session


def test_kafka_source_waits_briefly_at_the_end_of_the_log_unless_told_otherwise() -> None:
    # Kafka's 500 ms fetch wait stalls every batch that reads to the end of the log
    # (SOURCE_DEFAULTS); the user's source_options still win, key by key
    assert int(_settings().kafka_source_options()["kafka.fetch.max.wait.ms"]) <= 50
    own = _settings(source_options={"kafka.fetch.max.wait.ms": "500", "failOnDataLoss": "false"})
    assert own.kafka_source_options() == {
        "kafka.fetch.max.wait.ms": "500",
        "failOnDataLoss": "false",
        "maxOffsetsPerTrigger": "1000000",
    }


def test_batches_are_capped_by_default_and_0_lifts_the_cap() -> None:
    # one batch of 5,000,000 records ran Spark's default 1 GB driver out of memory; 1,000,000 fit
    assert DEFAULT_MAX_OFFSETS_PER_TRIGGER == 1_000_000
    assert _settings().max_offsets_per_trigger == DEFAULT_MAX_OFFSETS_PER_TRIGGER
    assert _settings().kafka_source_options()["maxOffsetsPerTrigger"] == "1000000"
    assert _settings(max_offsets_per_trigger=50).kafka_source_options()["maxOffsetsPerTrigger"] == "50"
    for none in (0, None):  # the whole backlog in one batch
        assert "maxOffsetsPerTrigger" not in _settings(max_offsets_per_trigger=none).kafka_source_options()
    # the start-up line says what Spark's source gets
    assert pipeline._batch_cap(_settings()) == "at most 1,000,000 records a batch"
    assert pipeline._batch_cap(_settings(max_offsets_per_trigger=0)).startswith("no batch cap")
    own = _settings(source_options={"maxOffsetsPerTrigger": "7"})
    assert pipeline._batch_cap(own) == "at most 7 records a batch"


def test_pipeline_run_help_shows_the_batch_cap_and_its_default() -> None:
    import typer
    from typer.testing import CliRunner

    from laneway.ops import spark_cli

    app = typer.Typer(pretty_exceptions_enable=False)
    spark_cli.register(app)
    result = CliRunner().invoke(app, ["pipeline", "run", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "--max-offsets-per-trigger" in text and "0: no cap" in text, text
    assert re.search(r"--max-offsets-per-trigger .*?\[default: 1000000\]", text), text


@pytest.mark.parametrize(
    ("trigger", "ms"),
    [
        ("10s", 10_000),
        ("500ms", 500),
        ("500 milliseconds", 500),
        ("2 minutes", 120_000),
        ("1.5 seconds", 1500),
    ],
)
def test_processing_time_triggers(trigger: str, ms: int) -> None:
    assert _settings(trigger=trigger).trigger_interval_ms == ms


def test_bad_settings_name_every_bad_field() -> None:
    with pytest.raises(ValueError) as err:
        _settings(
            bootstrap=" ",
            trigger="soon",
            max_offsets_per_trigger=-1,
            compact_every=-1,
            starting_offsets="yesterday",
        )
    message = str(err.value)
    for name in ("bootstrap", "trigger", "max_offsets_per_trigger", "compact_every", "starting_offsets"):
        assert f"{name}:" in message


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("topic", None),
        ("trigger", 10),
        ("starting_offsets", -2),
        ("master", None),
        ("max_offsets_per_trigger", "1000"),
        ("max_offsets_per_trigger", 1.5),
        ("compact_every", "50"),
        ("compact_every", True),
        ("deletion_vectors", "no"),
        ("source_options", [("failOnDataLoss", "false")]),
        ("spark_conf", "spark.x=1"),
        ("progress_group", 5),
        ("client_config", ["sasl.password", "hunter2-pipeline"]),
        ("warehouse", 5),
    ],
)
def test_a_field_of_the_wrong_type_is_a_settings_error_naming_it(name: str, value: object) -> None:
    # these were a bare TypeError or AttributeError from a comparison or .strip(), or (a str for
    # deletion_vectors, a float for max_offsets_per_trigger) taken as they were
    with pytest.raises(ConfigError) as err:
        _settings(**{name: value})
    assert [field for field, _ in err.value.problems] == [name], err.value  # type: ignore[attr-defined]
    assert f"{name}: must be " in str(err.value)
    assert "hunter2" not in str(err.value)  # a dict's value is not printed: it may hold secrets


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("master", None),
        ("app_name", 5),
        ("driver_memory", 1024),
        ("shuffle_partitions", "4"),
        ("shuffle_partitions", True),
        ("ui", "no"),
        ("conf", "spark.x=1"),
    ],
)
def test_a_session_setting_of_the_wrong_type_is_a_config_error_naming_it(name: str, value: object) -> None:
    # master=None and shuffle_partitions="4" failed with an AttributeError or a TypeError; ui="no",
    # app_name=5 and driver_memory=1024 were taken, for Spark to refuse or misread
    with pytest.raises(ConfigError) as err:
        SessionSettings(**{name: value})  # type: ignore[arg-type]
    assert err.value.field == f"SessionSettings.{name}", err.value
    assert err.value.reason.startswith("must be "), err.value


def test_a_path_is_taken_for_the_warehouse_and_the_checkpoint(tmp_path: Path) -> None:
    s = _settings(warehouse=tmp_path / "w", checkpoint=tmp_path / "c")
    assert s.warehouse == str(tmp_path / "w") and s.checkpoint == str(tmp_path / "c")


def test_extra_jars_skip_what_pyspark_ships(tmp_path: Path) -> None:
    libs, shipped = tmp_path / "libs", tmp_path / "shipped"
    libs.mkdir()
    shipped.mkdir()
    for name in ("kafka-clients-3.9.0.jar", "scala-library-2.13.13.jar", "delta-spark_2.13-4.0.0.jar"):
        (libs / name).touch()
    (shipped / "scala-library-2.13.16.jar").touch()
    assert [p.name for p in extra_jars(libs, shipped=shipped)] == [
        "delta-spark_2.13-4.0.0.jar",
        "kafka-clients-3.9.0.jar",
    ]


def test_session_conf_has_delta_and_small_defaults() -> None:
    conf = SessionSettings(conf={"spark.sql.shuffle.partitions": "8"}).spark_conf([Path("/x/a.jar")])
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.ui.enabled"] == "false" and conf["spark.jars"] == "/x/a.jar"
    assert conf["spark.sql.shuffle.partitions"] == "8"  # conf wins
    # a batch generates ~110 classes: Spark's default cache of 100 recompiled them every batch
    assert int(conf["spark.sql.codegen.cache.maxEntries"]) >= 500
    assert "-XX:+UseParallelGC" in conf["spark.driver.extraJavaOptions"]  # a JVM this session starts
    log4j = conf["spark.driver.extraJavaOptions"].split("-Dlog4j2.configurationFile=")[1].split()[0]
    assert log4j == LOG4J2.as_uri() and LOG4J2.is_file()  # packaged beside the module
    assert Path(conf["spark.sql.warehouse.dir"]).is_absolute()  # never ./spark-warehouse
    own = SessionSettings(conf={"spark.driver.extraJavaOptions": "-Xss4m"}).spark_conf([])
    assert own["spark.driver.extraJavaOptions"] == "-Xss4m"  # conf wins here too


def test_stats_columns_are_columns_of_their_table() -> None:
    assert set(schema.TABLE_PROPERTIES) == set(schema.TABLES)
    for table, props in schema.TABLE_PROPERTIES.items():
        columns = {line.split()[0] for line in schema.TABLE_DDL[table].strip().splitlines()}
        assert set(props["delta.dataSkippingStatsColumns"].split(",")) <= columns, table


def test_weighted_quantile() -> None:
    points = [(float(v), 1.0) for v in range(1, 101)]
    assert metrics._weighted_quantile(points, 0.5) == 50.0
    assert metrics._weighted_quantile(points, 0.99) == 99.0
    assert metrics._weighted_quantile([], 0.5) is None


def test_table_paths() -> None:
    assert schema.table_path("/w/", schema.ENTITIES) == "/w/entities"
    assert "version BIGINT" in schema.record_schema()


def test_shuffle_partitions_one_per_25k_records_at_least_one_per_core() -> None:
    # a small batch on a large entities table rewrites the table: on one task, one core worked
    assert batch._shuffle_partitions(21, configured=4, cores=2) == 2
    assert batch._shuffle_partitions(0, configured=4, cores=2) == 2
    assert batch._shuffle_partitions(60_000, configured=4, cores=2) == 3
    assert batch._shuffle_partitions(250_000, configured=4, cores=2) == 4  # at most the configured
    assert batch._shuffle_partitions(21, configured=1, cores=8) == 1
    assert batch._shuffle_partitions(21, configured=200, cores=1) == 1


@pytest.mark.parametrize("master", ["spark://10.0.0.5:7077", "yarn", "k8s://https://api:6443"])
@pytest.mark.parametrize("path", ["warehouse", "./data/catalog", "~/catalog", "file:catalog", "hdfs:catalog"])
def test_a_cluster_refuses_a_relative_warehouse_or_checkpoint(master: str, path: str) -> None:
    # a relative path names a folder under the driver's current folder: the workers do not see it
    with pytest.raises(ConfigError) as err:
        _settings(master=master, warehouse=path)
    assert "warehouse:" in str(err.value) and "checkpoint:" not in str(err.value)
    assert "absolute path" in str(err.value) and "s3a://" in str(err.value)
    with pytest.raises(ConfigError, match="checkpoint: with master"):
        _settings(master=master, checkpoint=path)


@pytest.mark.parametrize(
    "path", ["/shared/catalog", "file:///shared/catalog", "hdfs://namenode:8020/catalog", "s3a://bucket/c"]
)
def test_a_cluster_takes_an_absolute_path_or_uri(path: str) -> None:
    s = _settings(master="spark://10.0.0.5:7077", warehouse=path, checkpoint=f"{path}/_cp")
    assert (s.warehouse, s.checkpoint) == (path, f"{path}/_cp")
    assert shared_path_problem(path) is None


def test_a_local_master_makes_a_relative_path_absolute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Delta takes absolute table paths only (delta.`warehouse/entities` is not a path to it)
    monkeypatch.chdir(tmp_path)
    for master in ("local[*]", "local-cluster[2,1,1024]"):
        s = _settings(master=master, warehouse="warehouse", checkpoint="warehouse/_cp")
        assert (s.warehouse, s.checkpoint) == (str(tmp_path / "warehouse"), str(tmp_path / "warehouse/_cp"))
    assert _settings(warehouse="s3a://bucket/c").warehouse == "s3a://bucket/c"
    assert local_master("local-cluster[2,1,1024]") and not local_master("spark://h:7077")
