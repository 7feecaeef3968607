"""Options the commands share read the same everywhere: ``--log-level`` on every command that
runs for a while (``catalog sync`` had none), and ``--warehouse``'s help names its environment
variable once (it said it twice: in its text and in typer's ``[env var: ...]``)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from laneway.catalog import producing, sync
from laneway.ops import catalog_cli, cli


def _invoke(*args: str) -> Any:
    if not any(g.name == "catalog" for g in cli.app.registered_groups):
        cli._register_subcommands()
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "400"})


def _help_line(path: tuple[str, ...], option: str) -> str:
    result = _invoke(*path, "--help")
    assert result.exit_code == 0, result.output
    lines = [line.strip(" │") for line in result.output.splitlines() if line.strip(" │").startswith(option)]
    assert len(lines) == 1, result.output
    return " ".join(lines[0].split())


LONG_RUNNING = [("run",), ("catalog", "sync"), ("pipeline", "run")]


@pytest.mark.parametrize("path", LONG_RUNNING, ids=" ".join)
def test_every_long_running_command_has_the_same_log_level_option(path: tuple[str, ...]) -> None:
    line = _help_line(path, "--log-level")
    assert line == _help_line(("run",), "--log-level")
    assert "DEBUG, INFO, WARNING, ERROR" in line and "[default: INFO]" in line, line


def test_catalog_sync_refuses_an_unknown_log_level_before_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    reached: list[Any] = []
    monkeypatch.setattr(producing, "ensure_topics", lambda *a, **k: reached.append(a))
    monkeypatch.setattr(sync, "CatalogSync", lambda *a, **k: reached.append(a))
    monkeypatch.setattr(catalog_cli, "_check_access", lambda *a: reached.append(a))
    result = _invoke("catalog", "sync", "-b", "127.0.0.1:1", "--log-level", "LOUD")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        "error: --log-level: unknown level 'LOUD' (DEBUG, INFO, WARNING, ERROR)"
    ]
    assert reached == []


@pytest.mark.parametrize(
    "path",
    [("pipeline", "run"), ("catalog", "show"), ("catalog", "search"), ("catalog", "lineage")],
    ids=" ".join,
)
def test_the_warehouse_help_names_its_variable_once(path: tuple[str, ...]) -> None:
    line = _help_line(path, "--warehouse")
    assert line.count("LANEWAY_WAREHOUSE") == 1, line
    assert "[env var: LANEWAY_WAREHOUSE]" in line, line
