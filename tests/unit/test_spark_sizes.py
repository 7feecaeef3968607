"""Spark's memory sizes refused before a JVM starts.

A bad ``spark.driver.memory`` reached the driver's JVM as ``-Xmx<value>``: pyspark said only
``[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number``, after the
JVM's own ``Invalid maximum heap size: -Xmxlots`` (or ``-Xmx1gb``; ``-Xmx2048`` is 2048 bytes:
``Too small maximum heap``). No Spark, no broker here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from laneway.errors import ConfigError
from laneway.ops import cli
from laneway.spark.session import SessionSettings
from laneway.spark.settings import PipelineSettings, PipelineSettingsError


def _settings(**kw: object) -> PipelineSettings:
    base: dict[str, object] = {"bootstrap": "b:9092", "warehouse": "/w", "checkpoint": "/c"}
    return PipelineSettings(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize("size", ["1g", "1G", "512m", "512M", "1048576k", "1t", "01g"])
def test_the_driver_takes_the_sizes_its_jvm_takes(size: str) -> None:
    assert SessionSettings(driver_memory=size).spark_conf([])["spark.driver.memory"] == size


@pytest.mark.parametrize(
    ("size", "hint"),
    [
        ("lots", ""),
        ("", ""),
        ("1.5g", ""),
        ("-1g", ""),
        (" 1g", ""),
        ("1 g", ""),
        ("1gib", ""),
        ("2048", "without a unit"),  # -Xmx2048: 2048 bytes, where Spark reads MiB
        ("1gb", "the JVM's -Xmx does not"),  # Spark reads it, the driver's JVM refuses it
        ("1P", "the JVM's -Xmx does not"),
        ("0g", "above 0"),
    ],
)
def test_a_driver_memory_its_jvm_refuses_is_a_config_error_naming_it(size: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        SessionSettings(driver_memory=size)
    err = info.value
    assert err.field == "SessionSettings.driver_memory", err
    assert err.reason.startswith("must be ") and f"got {size!r}" in err.reason, err
    assert "'1g'" in err.reason and hint in err.reason, err  # an example, and why
    assert str(err).count("driver_memory") == 1, err


def test_a_memory_size_in_conf_is_checked_too() -> None:
    # conf's spark.driver.memory wins over driver_memory: the same -Xmx
    with pytest.raises(ConfigError) as info:
        SessionSettings(conf={"spark.driver.memory": "lots"})
    assert info.value.field == "SessionSettings.conf", info.value
    assert info.value.reason.startswith("spark.driver.memory: must be "), info.value
    assert "got 'lots'" in info.value.reason
    with pytest.raises(ConfigError, match=r"spark.executor.memory: must be .*got 'lots'"):
        SessionSettings(conf={"spark.executor.memory": "lots"})
    # an executor's heap is Spark's to size (a number without a unit: MiB), its syntax is wider
    for key, size in [
        ("spark.executor.memory", "1gb"),
        ("spark.executor.memory", "2048"),
        ("spark.executor.memoryOverhead", "384m"),
        ("spark.driver.maxResultSize", "0"),
        ("spark.other.setting", "lots"),  # not a size: passed through as it is
    ]:
        assert SessionSettings(conf={key: size}).conf == {key: size}


@pytest.mark.parametrize(
    "size", ["2048", "1b", "1K", "1kb", "1MB", "1g", " 1g ", "1tb", "1p", "1PB", "9223372036854775807"]
)
def test_spark_size_syntax_takes_what_javautils_takes(size: str) -> None:
    from laneway.spark.sizes import size_problem

    assert size_problem(size) is None


@pytest.mark.parametrize("size", ["lots", "", "1.5g", "-1", "1 g", "1gib", "g", "9223372036854775808"])
def test_spark_size_syntax_refuses_what_javautils_refuses(size: str) -> None:
    from laneway.spark.sizes import size_problem

    said = size_problem(size)
    assert said is not None and said.startswith("must be ") and f"got {size!r}" in said, said


def test_pipeline_settings_check_the_memory_sizes_of_spark_conf() -> None:
    with pytest.raises(PipelineSettingsError) as info:
        _settings(spark_conf={"spark.driver.memory": "lots"})
    [(name, why)] = info.value.problems
    assert name == "spark_conf" and why.startswith("spark.driver.memory: must be ") and "'lots'" in why


def _invoke(args: list[str]) -> tuple[int, list[str]]:
    if not any(g.name == "pipeline" for g in cli.app.registered_groups):
        cli._register_subcommands()
    result = CliRunner().invoke(cli.app, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


def test_pipeline_run_refuses_a_bad_driver_memory_in_one_line(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    run = ["pipeline", "run", "--bootstrap", "127.0.0.1:1", "--warehouse", str(warehouse)]
    code, lines = _invoke([*run, "--conf", "spark.driver.memory=lots"])
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: --conf spark.driver.memory: must be "), lines
    assert "got 'lots'" in lines[0] and "'1g'" in lines[0], lines
    assert not warehouse.exists()


def test_a_query_command_refuses_a_bad_driver_memory_before_spark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from laneway.spark import schema, session

    def no_spark(*_: object, **__: object) -> None:
        raise AssertionError("a Spark session was built")

    monkeypatch.setattr(session, "build_session", no_spark)
    for table in (schema.ENTITIES, schema.ENTITY_HISTORY, schema.LINEAGE_EDGES):
        (tmp_path / table / "_delta_log").mkdir(parents=True)
    code, lines = _invoke(
        ["catalog", "show", "x", "--warehouse", str(tmp_path), "--conf", "spark.driver.memory=1gb"]
    )
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: --conf spark.driver.memory: must be "), lines
    assert "got '1gb'" in lines[0], lines
