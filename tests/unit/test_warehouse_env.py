"""An empty ``$LANEWAY_WAREHOUSE`` was taken as unset: the relative folder ``warehouse``, without
a word (a pipeline wrote its tables there, a query read them from there). It is refused, as an
empty ``--warehouse`` is; an explicit ``--warehouse`` still wins over the variable."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from laneway.ops import cli

EMPTY = "error: LANEWAY_WAREHOUSE is set but empty: set it to the folder of the Delta tables, or unset it"


@pytest.fixture(autouse=True)
def _elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./warehouse here
    if not any(g.name == "pipeline" for g in cli.app.registered_groups):
        cli._register_subcommands()


def _lines(args: list[str], env: str | None) -> tuple[int, list[str]]:
    result = CliRunner().invoke(cli.app, args, env={"LANEWAY_WAREHOUSE": env, "COLUMNS": "300"})
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "args",
    [
        ["catalog", "search", "orders"],
        ["catalog", "show", "table:sales.orders"],
        ["catalog", "lineage", "sales.orders"],
        ["pipeline", "run", "--bootstrap", "127.0.0.1:1"],
    ],
)
@pytest.mark.parametrize("env", ["", "  "])
def test_an_empty_variable_is_refused(args: list[str], env: str) -> None:
    code, lines = _lines(args, env)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(EMPTY), lines
    assert not Path("warehouse").exists()


def test_an_explicit_warehouse_wins_over_an_empty_variable(tmp_path: Path) -> None:
    code, lines = _lines(["catalog", "search", "orders", "--warehouse", str(tmp_path / "wh")], "")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: no catalog tables in {tmp_path / 'wh'} "), lines


@pytest.mark.parametrize("env", [None, ""])
def test_an_empty_option_is_refused(env: str | None) -> None:
    code, lines = _lines(["catalog", "search", "orders", "--warehouse", ""], env)
    assert code == 2 and lines == ["error: --warehouse: must not be empty"], lines


def test_unset_is_the_relative_default() -> None:
    code, lines = _lines(["catalog", "search", "orders"], None)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: no catalog tables in warehouse ")
