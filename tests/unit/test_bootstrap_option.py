"""An empty ``--bootstrap`` (or ``$LANEWAY_BOOTSTRAP``) is refused, not taken as unset: ``laneway
lag GROUP -b ""`` went to the broker ``laneway broker start`` recorded, and exited 0."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from laneway.ops import bootstrap, cli


def _root() -> Any:
    if not any(g.name == "catalog" for g in cli.app.registered_groups):
        cli._register_subcommands()
    return typer.main.get_command(cli.app)


def _commands_taking_bootstrap() -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []

    def walk(group: Any, path: tuple[str, ...]) -> None:
        for name, command in group.commands.items():
            if isinstance(command, TyperGroup):
                walk(command, (*path, name))
            elif any(p.name == "bootstrap" for p in command.params):
                found.append((*path, name))

    walk(_root(), ())
    return found


COMMANDS = _commands_taking_bootstrap()


def _invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "400", **(env or {})})


def test_the_commands_taking_bootstrap_are_found() -> None:
    assert {("lag",), ("replay",), ("topics", "describe"), ("catalog", "sync")} <= set(COMMANDS), COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_bootstrap_exits_2_on_every_command(path: tuple[str, ...], empty: str) -> None:
    result = _invoke(*path, "-b", empty)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[0].startswith("error: --bootstrap: must not be empty"), (
        result.stderr
    )


def test_lag_with_an_empty_bootstrap_does_not_reach_a_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    # the finding: `laneway lag review-app -b ""` read the recorded broker's lag and exited 0
    from laneway.ops import cli_common

    reached: list[Any] = []
    monkeypatch.setattr(cli_common.ka, "connect", lambda *a, **k: reached.append(a))
    result = _invoke("lag", "review-app", "--bootstrap", "")
    assert result.exit_code == 2, result.output
    assert reached == []


def test_an_empty_bootstrap_variable_is_refused_where_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANEWAY_BOOTSTRAP", "")
    with pytest.raises(typer.Exit) as info:
        bootstrap.resolve_bootstrap(None)
    assert info.value.exit_code == 2
    assert bootstrap.resolve_bootstrap("h:1") == "h:1"  # the option comes before the variable
    monkeypatch.setenv("LANEWAY_BOOTSTRAP", "h:2")
    assert bootstrap.resolve_bootstrap(None) == "h:2"


def test_an_empty_bootstrap_variable_exits_2_with_its_name() -> None:
    result = _invoke("lag", "review-app", env={"LANEWAY_BOOTSTRAP": ""})
    assert result.exit_code == 2, result.output
    assert "LANEWAY_BOOTSTRAP is set but empty" in result.stderr


def test_the_empty_bootstrap_message_gives_the_order_used() -> None:
    # the finding: it said "then $LANEWAY_BOOTSTRAP, then ...", leaving out the --client-config
    # file's bootstrap.servers, which with_client_config takes before the variable
    result = _invoke("lag", "app1", "-b", "")
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert (
        "leave the option out (then the --client-config file's bootstrap.servers, "
        "then $LANEWAY_BOOTSTRAP, then `laneway broker`'s, then 127.0.0.1:9092)"
    ) in message, result.stderr
