"""An empty client config is refused, not taken as unset: ``laneway topics list --client-config ""``
and ``LANEWAY_CLIENT_CONFIG= laneway topics list`` ran without the settings, and
``--client-config ""`` dropped the variable's file; ``App(client_config="")`` read ``.``."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from laneway import App, ConfigError
from laneway.kafka import client_config as cc
from laneway.ops import cli

from .test_bootstrap_option import _root

OPTION = "error: --client-config: must not be empty"
VARIABLE = "error: LANEWAY_CLIENT_CONFIG is set but empty"


def _commands_taking_client_config() -> list[tuple[str, ...]]:
    from typer.core import TyperGroup

    found: list[tuple[str, ...]] = []

    def walk(group: Any, path: tuple[str, ...]) -> None:
        for name, command in group.commands.items():
            if isinstance(command, TyperGroup):
                walk(command, (*path, name))
            elif any(p.name == "client_config" for p in command.params):
                found.append((*path, name))

    walk(_root(), ())
    return found


COMMANDS = _commands_taking_client_config()


def _invoke(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "400", **(env or {})})


def test_the_commands_taking_client_config_are_found() -> None:
    assert {("lag",), ("topics", "list"), ("catalog", "sync")} <= set(COMMANDS), COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_client_config_exits_2_on_every_command(path: tuple[str, ...], empty: str) -> None:
    result = _invoke(*path, "--client-config", empty)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[0].startswith(OPTION), result.stderr


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_an_empty_client_config_variable_exits_2_on_every_command(path: tuple[str, ...]) -> None:
    result = _invoke(*path, env={cc.ENV_VAR: ""})
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[0].startswith(VARIABLE), result.stderr


def test_an_empty_option_does_not_drop_the_variables_file(monkeypatch: pytest.MonkeyPatch) -> None:
    from laneway.ops import cli_common

    reached: list[Any] = []
    monkeypatch.setattr(cli_common.ka, "connect", lambda *a, **k: reached.append(a))
    result = _invoke("topics", "list", "--client-config", "", env={cc.ENV_VAR: "app.properties"})
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(OPTION), result.stderr
    assert reached == []


def test_a_given_option_comes_before_an_empty_variable(tmp_path: Any) -> None:
    missing = tmp_path / "nope.properties"
    result = _invoke("topics", "list", "--client-config", str(missing), env={cc.ENV_VAR: ""})
    assert result.exit_code == 2, result.output
    assert "no such file" in result.stderr, result.stderr  # the option was read, not the variable


@pytest.mark.parametrize("empty", ["", " "])
def test_an_empty_client_config_argument_raises_config_error(empty: str) -> None:
    with pytest.raises(ConfigError, match="client_config: must not be empty"):
        App(name="a", bootstrap_servers="h:1", client_config=empty)
