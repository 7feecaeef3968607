"""`laneway run`'s bad options: one line and exit 2, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from laneway.ops import cli
from laneway.ops.cli import app


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--log-level", "bogus"], "--log-level: unknown level 'bogus'"),
        (["--metrics-port", "99999"], "metrics_server.port: must be a port number"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: list[str], says: str
) -> None:
    source = 'from laneway import App\napp = App("x", bootstrap_servers="127.0.0.1:1")\n'
    (tmp_path / "someapp.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    if not any(c.name == "run" for c in app.registered_commands):
        cli._register_subcommands()
    result = CliRunner().invoke(app, ["run", "someapp:app", *option])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0]


def test_an_error_in_the_apps_module_names_its_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # seen: `error: invalid literal for int() with base 10: 'ten'`, with no file or line
    source = (
        'from laneway import App\nCONCURRENCY = int("ten")\napp = App("x", bootstrap_servers="127.0.0.1:1")\n'
    )
    (tmp_path / "badmodapp.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    if not any(c.name == "run" for c in app.registered_commands):
        cli._register_subcommands()
    result = CliRunner().invoke(app, ["run", "badmodapp:app"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "invalid literal for int()" in lines[0], lines
    assert f"({tmp_path / 'badmodapp.py'}, line 2)" in lines[0], lines


def test_a_target_that_is_not_an_app_names_its_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "notanapp.py").write_text("app = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    if not any(c.name == "run" for c in app.registered_commands):
        cli._register_subcommands()
    result = CliRunner().invoke(app, ["run", "notanapp:app"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == "error: notanapp:app is of type int, not a laneway.App"  # not "a int"
