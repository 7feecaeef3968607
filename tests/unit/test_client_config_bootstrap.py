"""An empty ``bootstrap.servers`` (or ``metadata.broker.list``) is refused, not taken as unset: in a
client-config file, every command line fell back to ``--bootstrap``, ``$LANEWAY_BOOTSTRAP`` or
the recorded broker without a word; in an App's ``kafka_config`` or ``producer_config`` it was
dropped for ``bootstrap_servers``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from laneway import App, ConfigError
from laneway.kafka import client_config as cc
from laneway.ops import cli

from .test_bootstrap_option import _root
from .test_client_config_empty import COMMANDS

KEYS = ["bootstrap.servers", "metadata.broker.list"]


class _Ran(Exception):
    """The command went on to build its clients with the file's settings."""


def _ran(settings: Any) -> Any:
    raise _Ran(settings)


def _file(tmp_path: Path, key: str, value: str = "") -> Path:
    f = tmp_path / "client.properties"
    f.write_text(f"client.id=tools\n{key}={value}\n")
    return f


def _required_arguments(path: tuple[str, ...]) -> list[str]:
    command = _root()
    for name in path:
        command = command.commands[name]
    return ["x" for p in command.params if p.required]


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("value", ["", "  "])
def test_the_loader_refuses_an_empty_broker_list_naming_file_line_and_setting(
    tmp_path: Path, key: str, value: str
) -> None:
    f = _file(tmp_path, key, value)
    with pytest.raises(ConfigError) as info:
        cc.load_client_config(f)
    assert info.value.field == "client_config"
    assert f"{f} line 2: {key}: must not be empty" in info.value.reason


def test_a_broker_list_given_is_kept(tmp_path: Path) -> None:
    settings = cc.load_client_config(_file(tmp_path, "bootstrap.servers", "k:9092"))
    assert settings["bootstrap.servers"] == "k:9092"


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("key", KEYS)
def test_an_empty_broker_list_in_the_file_exits_2_on_every_command(
    path: tuple[str, ...], key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cc, "using", _ran)  # no broker is reached either way
    f = _file(tmp_path, key)
    result = CliRunner().invoke(
        cli.app, [*path, *_required_arguments(path), "--client-config", str(f)], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 2, (result.output, result.exception)
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith(f"error: --client-config: {f} line 2: {key}: must not be empty"), result.stderr


def test_an_empty_broker_list_in_the_file_exits_2_when_bootstrap_is_given_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --bootstrap comes before the file's bootstrap.servers, but the file is still wrong
    monkeypatch.setattr(cc, "using", _ran)
    f = _file(tmp_path, "bootstrap.servers")
    result = CliRunner().invoke(
        cli.app, ["lag", "g", "-b", "127.0.0.1:1"], env={"COLUMNS": "400", cc.ENV_VAR: str(f)}
    )
    assert result.exit_code == 2, (result.output, result.exception)
    assert "bootstrap.servers: must not be empty" in result.stderr, result.stderr


@pytest.mark.parametrize("field", ["kafka_config", "producer_config"])
@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_broker_list_in_the_apps_settings_is_a_config_error(
    field: str, key: str, value: str
) -> None:
    with pytest.raises(ConfigError) as info:
        App("a", bootstrap_servers="h:1", **{field: {key: value}})
    assert info.value.field == field
    assert info.value.reason.startswith(f"{key}: must not be empty"), info.value.reason


def test_an_empty_broker_list_in_the_apps_client_config_file_is_a_config_error(tmp_path: Path) -> None:
    f = _file(tmp_path, "bootstrap.servers")
    said = f"client_config: {f} line 2: bootstrap.servers: must not be empty"
    with pytest.raises(ConfigError, match=re.escape(said)):
        App("a", bootstrap_servers="h:1", client_config=f)


# -- a non-empty metadata.broker.list: librdkafka's other name of bootstrap.servers ------------


def _effective_broker_list(conf: dict[str, Any]) -> Any:
    """The broker list a client built with ``conf`` connects to: the two keys are one librdkafka
    property, and confluent-kafka sets the settings in the dict's order, so the last one wins."""
    return [v for k, v in conf.items() if k in KEYS][-1]


def test_the_loader_reads_metadata_broker_list_as_bootstrap_servers(tmp_path: Path) -> None:
    settings = cc.load_client_config(_file(tmp_path, "metadata.broker.list", "k:9092"))
    assert settings == {"client.id": "tools", "bootstrap.servers": "k:9092"}


def test_a_file_giving_both_names_is_refused_naming_both_lines(tmp_path: Path) -> None:
    f = tmp_path / "client.properties"
    f.write_text("bootstrap.servers=a:9092\nclient.id=tools\nmetadata.broker.list=b:9092\n")
    with pytest.raises(ConfigError) as info:
        cc.load_client_config(f)
    assert info.value.field == "client_config"
    assert info.value.reason.startswith(
        f"{f} line 3: metadata.broker.list is bootstrap.servers (line 1) under another name"
    ), info.value.reason


class _Connected(Exception):
    """The command asked to connect: what to, and with which admin settings."""


def _connect_records(monkeypatch: pytest.MonkeyPatch) -> None:
    from laneway.kafka import admin as ka
    from laneway.ops import cli_common

    def connect(address: str, *args: Any, **kwargs: Any) -> Any:
        raise _Connected(address, ka.client_config(address))

    monkeypatch.setattr(cli_common.ka, "connect", connect)


@pytest.mark.parametrize(
    ("option", "expected"),
    [([], "k:9092"), (["-b", "h:1"], "h:1")],
    ids=["the file's", "--bootstrap over the file's"],
)
def test_a_commands_clients_go_where_its_messages_say(
    option: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the finding: the file's metadata.broker.list was left in the settings every client took,
    # after bootstrap.servers: without -b the command checked and named the recorded broker (or
    # 127.0.0.1:9092) while its admin client went to the file's brokers; with -b, the same
    monkeypatch.delenv("LANEWAY_BOOTSTRAP", raising=False)
    _connect_records(monkeypatch)
    f = _file(tmp_path, "metadata.broker.list", "k:9092")
    result = CliRunner().invoke(cli.app, ["lag", "g", *option, "--client-config", str(f)])
    assert isinstance(result.exception, _Connected), (result.output, result.exception)
    address, conf = result.exception.args
    assert address == expected
    assert _effective_broker_list(conf) == expected, conf


def test_a_file_giving_both_names_exits_2_on_a_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cc, "using", _ran)  # no broker is reached either way
    f = tmp_path / "client.properties"
    f.write_text("metadata.broker.list=b:9092\nbootstrap.servers=a:9092\n")
    result = CliRunner().invoke(cli.app, ["lag", "g", "-b", "h:1", "--client-config", str(f)])
    assert result.exit_code == 2, (result.output, result.exception)
    said = f"error: --client-config: {f} line 2: bootstrap.servers is metadata.broker.list (line 1)"
    assert result.stderr.startswith(said), result.stderr


def test_an_app_takes_its_bootstrap_servers_over_the_files_metadata_broker_list(tmp_path: Path) -> None:
    app = App("a", bootstrap_servers="h:1", client_config=_file(tmp_path, "metadata.broker.list", "k:9092"))
    assert _effective_broker_list(app._client_config()) == "h:1"
    assert _effective_broker_list(app._producer_config()) == "h:1"
