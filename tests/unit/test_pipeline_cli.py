"""`laneway pipeline run`'s bad options: one line and exit 2, before Spark (or a broker) is needed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from laneway.ops import cli, spark_cli


def _invoke(args: list[str]) -> tuple[int, list[str]]:
    if not any(g.name == "pipeline" for g in cli.app.registered_groups):
        cli._register_subcommands()
    result = CliRunner().invoke(cli.app, ["pipeline", "run", "--bootstrap", "127.0.0.1:1", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--log-level", "LOUD"], "--log-level: unknown level 'LOUD'"),
        (["--metrics-port", "99999"], "--metrics-port: must be a port number 0-65535"),
        (["--metrics-port", "-1"], "--metrics-port: must be a port number 0-65535"),
        (["--warehouse", "/proc/x"], "--warehouse: cannot create and write to /proc/x"),
        (["--warehouse", "file:///proc/x"], "--warehouse: cannot create and write to file:///proc/x"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2(option: list[str], says: str) -> None:
    code, lines = _invoke(option)
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines


def test_a_file_in_place_of_the_checkpoint_folder_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, lines = _invoke(["--warehouse", str(tmp_path / "wh"), "--checkpoint", str(blocker / "cp")])
    assert code == 2, lines
    assert len(lines) == 1 and f"--checkpoint: cannot create and write to {blocker / 'cp'}" in lines[0]
    assert f"({blocker} is a file, not a folder)" in lines[0]  # it said "(File exists)"
    code, lines = _invoke(["--warehouse", str(blocker)])
    assert code == 2 and len(lines) == 1, lines
    assert f"--warehouse: cannot create and write to {blocker} ({blocker} is a file, not" in lines[0]


def test_the_write_check_leaves_no_folder_behind(tmp_path: Path) -> None:
    target = tmp_path / "new" / "warehouse"
    assert spark_cli._write_problem(target) is None
    assert list(tmp_path.iterdir()) == []
    existing = tmp_path / "there"
    existing.mkdir()
    assert spark_cli._write_problem(existing) is None
    assert existing.is_dir() and list(existing.iterdir()) == []


def test_another_file_system_is_left_to_spark() -> None:
    assert spark_cli._local_path("s3a://bucket/catalog") is None
    assert spark_cli._local_path("file:///data/catalog") == Path("/data/catalog")
    assert spark_cli._local_path("warehouse") == Path("warehouse")


# --master and --starting-offsets reached Spark: a py4j stack trace, and for the offsets empty
# tables and a checkpoint left behind. Both are one line, exit 2, before a session or a table.
@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--master", "bogus"], "error: --master: 'bogus' is not a Spark master URL: use local, local[N]"),
        (["--master", "local[0]"], "error: --master: 'local[0]' is not a Spark master URL"),
        (["--master", "spark://host"], "error: --master: 'spark://host' is not a Spark master URL"),
        (["--master", "mesos://m:5050"], "error: --master: 'mesos://m:5050': Spark 4 has no Mesos support"),
        (["--starting-offsets", "{bad"], "error: --starting-offsets: '{bad' is not earliest, latest or JSON"),
        (["--starting-offsets", "yesterday"], "error: --starting-offsets: 'yesterday' is not earliest"),
        (
            ["--starting-offsets", '{"orders": {"0": 5}}'],
            "error: --starting-offsets: '{\"orders\": {\"0\": 5}}' must name the topic 'catalog.entities'",
        ),
        (["--starting-offsets", '{"catalog.entities": {"0": "5"}}'], "offset '5' of partition 0"),
        (["--starting-offsets", '{"catalog.entities": {"zero": 5}}'], "partition 'zero' is not a partition"),
    ],
)
def test_a_bad_master_or_starting_offsets_is_one_line_before_spark(
    tmp_path: Path, option: list[str], says: str
) -> None:
    warehouse = tmp_path / "wh"
    code, lines = _invoke(["--warehouse", str(warehouse), *option])
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    assert not warehouse.exists()  # no table, no checkpoint


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--compact-every", "-1"], "error: --compact-every: must be >= 0, got -1"),
        (["--trigger", "soon"], "error: --trigger: 'soon' is neither 'available-now' nor an interval"),
        # it said "'0s' is neither 'available-now' nor an interval": it is one, of 0
        (["--trigger", "0s"], "error: --trigger: '0s': an interval must be above 0 (1ms at least)"),
        (["--max-offsets-per-trigger", "-1"], "error: --max-offsets-per-trigger: must be >= 0"),
        (["--topic", " "], "error: --topic: must not be empty"),
        # it was taken as no --checkpoint: the default, under the warehouse
        (["--checkpoint", ""], "error: --checkpoint: must not be empty"),
        # the default checkpoint, under a relative warehouse, is not said a second time
        (
            ["--master", "spark://10.0.0.5:7077", "--warehouse", "catalog"],
            "error: --warehouse: with master 'spark://10.0.0.5:7077', 'catalog' is a relative path",
        ),
        (
            ["--master", "yarn", "--warehouse", "/shared/c", "--checkpoint", "cp"],
            "error: --checkpoint: with master 'yarn', 'cp' is a relative path",
        ),
    ],
)
def test_a_settings_error_names_the_option_typed(option: list[str], says: str) -> None:
    """It said `PipelineSettings: compact_every: ...`, the field's name, not the option's."""
    code, lines = _invoke(option)
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith(says), lines
    assert "PipelineSettings" not in lines[0] and lines[0].count("checkpoint") <= 1 + (
        "--checkpoint" in option
    )


def test_json_offsets_must_name_every_partition_of_the_topic_and_no_other() -> None:
    topic = SimpleNamespace(partitions={0: None, 1: None, 2: None})
    every = '{"t": {"0": 1, "1": -2, "2": -1}}'
    assert spark_cli._partitions_problem(every, "t", topic) is None
    assert spark_cli._partitions_problem("earliest", "t", topic) is None
    said = spark_cli._partitions_problem('{"t": {"0": 1, "7": 3}}', "t", topic)
    assert said is not None
    assert said.startswith("name every partition of 't' (3: 0-2) and no other, with -2 for earliest")
    assert said.endswith("it leaves out 1, 2; 't' has no partition 7")


def test_a_query_command_refuses_a_bad_master_before_spark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from laneway.spark import session

    def no_spark(*_: object, **__: object) -> None:
        raise AssertionError("a Spark session was built")

    monkeypatch.setattr(session, "build_session", no_spark)
    if not any(g.name == "catalog" for g in cli.app.registered_groups):
        cli._register_subcommands()
    result = CliRunner().invoke(
        cli.app, ["catalog", "show", "x", "--master", "bogus", "--warehouse", str(tmp_path)]
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --master: 'bogus' is not a Spark master URL"), (
        lines
    )


@pytest.mark.parametrize(
    "master",
    ["local", "local[4]", "local[*]", "local[2,3]", "local-cluster[2,1,1024]", "spark://h:7077",
     "spark://h1:7077,h2:7077", "spark://[::1]:7077", "yarn", "k8s://https://api:6443"],
)  # fmt: skip
def test_every_master_spark_takes_is_taken(master: str) -> None:
    from laneway.spark.session import SessionSettings
    from laneway.spark.settings import master_problem

    assert master_problem(master) is None
    assert SessionSettings(master=master).master == master


def test_the_session_refuses_a_bad_master() -> None:
    from laneway.errors import ConfigError
    from laneway.spark.session import SessionSettings

    with pytest.raises(ConfigError, match=r"SessionSettings.master: 'local\[\*' is not a Spark master URL"):
        SessionSettings(master="local[*")


def test_a_spark_master_port_out_of_range_and_earliest_in_capitals() -> None:
    from laneway.spark.settings import master_problem, offsets_partitions, starting_offsets_problem

    assert "port 70000 is not a port" in (master_problem("spark://h:70000") or "")
    assert "port 0 " in (master_problem("spark://a:7077,b:0") or "")
    assert master_problem("spark://a:7077,b:7078") is None
    assert starting_offsets_problem("EARLIEST", "t") is None and offsets_partitions(" Latest") is None


def test_an_empty_master_is_one_line_not_also_the_relative_warehouses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--master ''`` said the master was empty, and then that the relative warehouse would
    not do "with master ''"."""
    monkeypatch.chdir(tmp_path)
    code, lines = _invoke(["--master", "", "--warehouse", "catalog"])
    assert code == 2, lines
    assert len(lines) == 1 and lines[0] == "error: --master: must not be empty", lines
