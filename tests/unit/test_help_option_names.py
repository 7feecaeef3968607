"""Every command's ``--help`` shows its options' names whole at 80 columns.

typer draws the options in a table of columns (name, short name, the ``--no-...`` of a flag,
type, help); when they do not fit, rich narrows every column alike, the names' too, and cut
``--max-offsets-per-batch`` to ``--max-offsets-per…`` on ``laneway pipeline run --help``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from laneway.ops import cli
from laneway.ops.help_text import off_switch


def _root() -> Any:
    if not any(g.name == "pipeline" for g in cli.app.registered_groups):
        cli._register_subcommands()
    return typer.main.get_command(cli.app)


def _commands() -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))
        else:
            found.append(path)

    walk(_root(), ())
    return found


COMMANDS = _commands()


def _names(path: tuple[str, ...]) -> set[str]:
    command = _root()
    for name in path:
        command = command.commands[name]
    return {
        o for p in command.params if not getattr(p, "hidden", False) for o in (*p.opts, *p.secondary_opts)
    }


def test_the_commands_are_found() -> None:
    assert {("pipeline", "run"), ("catalog", "sync"), ("lag",), ("dlq", "redrive")} <= set(COMMANDS)


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_no_option_name_is_cut_at_80_columns(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli.app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert max(map(len, result.output.splitlines())) <= 80
    cut = re.findall(r"--?[\w-]*…", result.output)
    assert not cut, f"cut option names: {cut}\n{result.output}"
    # nor a word of the help (catalog generate's --no-progress column cut LANEWAY_CLIENT_CON…)
    assert "…" not in result.output, result.output
    shown = set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", result.output))
    missing = {n for n in _names(path) if n.startswith("-") and n not in shown and n != "--help"}
    assert not missing, f"not shown whole: {missing}\n{result.output}"


@pytest.mark.parametrize(
    ("path", "flag"),
    [(("pipeline", "run"), "--deletion-vectors"), (("catalog", "sync"), "--until-caught-up")],
    ids=["pipeline run", "catalog sync"],
)
def test_a_flag_declared_alone_still_takes_its_no(path: tuple[str, ...], flag: str) -> None:
    # their --no-... filled a column of its own, which pushed the names to be cut: hidden now
    command = _root()
    for name in path:
        command = command.commands[name]
    switches = [p for p in command.params if "--no-" + flag[2:] in p.opts]
    assert len(switches) == 1 and switches[0].hidden and not switches[0].expose_value


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], False),
        (["--fast"], True),
        (["--no-fast"], False),
        (["--fast", "--no-fast"], False),
        (["--no-fast", "--fast"], True),
    ],
)
def test_the_off_switch_sets_its_flag_the_last_given_winning(args: list[str], expected: bool) -> None:
    app = typer.Typer()
    seen: list[bool] = []

    @app.command()
    def main(
        fast: Annotated[bool, typer.Option("--fast")] = False,
        no_fast: Annotated[bool, off_switch("fast")] = False,
    ) -> None:
        seen.append(fast)

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen == [expected]
    assert "--no-fast" not in CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"}).output


@pytest.mark.parametrize(
    ("args", "expected"),
    [([], True), (["--no-progress"], False), (["--no-progress", "--progress"], True), (["--progress"], True)],
)
def test_a_flag_on_by_default_is_its_no_declared_alone(args: list[str], expected: bool) -> None:
    """``catalog generate``'s ``--progress/--no-progress`` took a column of its own; its
    ``--no-progress`` is declared alone and ``--progress`` still taken, hidden."""
    app = typer.Typer()
    seen: list[bool] = []

    @app.command()
    def main(
        no_progress: Annotated[bool, typer.Option("--no-progress")] = False,
        show_progress: Annotated[bool, off_switch("no_progress", "--progress")] = False,
    ) -> None:
        seen.append(not no_progress)

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen == [expected]
    shown = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "80"}).output
    assert "--no-progress" in shown and not re.search(r"--progress\b", shown)


def test_catalog_generate_hides_its_progress_switch() -> None:
    command = _root().commands["catalog"].commands["generate"]
    switches = [p for p in command.params if "--progress" in p.opts]
    assert len(switches) == 1 and switches[0].hidden and not switches[0].expose_value
