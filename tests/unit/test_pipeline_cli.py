"""`laneway pipeline run`'s bad options: one line and exit 2, before Spark (or a broker) is needed."""

from __future__ import annotations

from pathlib import Path

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
