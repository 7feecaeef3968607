"""`laneway broker start`'s refusals: one line and exit 2, before any Java starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from laneway.ops import broker as broker_mod
from laneway.ops import cli


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "broker" / "state.json"
    monkeypatch.setattr(cli, "_state_file", lambda: path)

    def no_java(*_: object) -> Path:
        raise AssertionError("the broker's jars were asked for: the check came too late")

    monkeypatch.setattr(broker_mod.jars, "ensure", no_java)
    return path


def _start(args: list[str]) -> tuple[int, list[str]]:
    result = CliRunner().invoke(cli.app, ["broker", "start", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--port", "70000"], "port 70000 is not a TCP port (1-65535)"),
        (["--port", "-5"], "port -5 is not a TCP port (1-65535)"),
        (["--data-dir", "/proc/rvx"], "cannot create and write the data directory /proc/rvx"),
    ],
)
def test_a_bad_port_or_data_dir_is_one_line_and_exit_2(state: Path, args: list[str], says: str) -> None:
    code, lines = _start(args)
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines


def test_a_file_in_place_of_the_data_dir_is_one_line(state: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, lines = _start(["--data-dir", str(blocker)])
    assert code == 2 and len(lines) == 1 and f"data directory {blocker}" in lines[0], lines


@pytest.mark.parametrize(
    ("running", "args", "says"),
    [
        ({}, ["--secure"], "a plain (PLAINTEXT) broker runs at 127.0.0.1:9"),
        ({"app": "/x/app.properties"}, [], "is the secured one"),
    ],
)
def test_a_running_broker_of_the_other_kind_is_refused(
    state: Path, monkeypatch: pytest.MonkeyPatch, running: dict[str, str], args: list[str], says: str
) -> None:
    broker_mod.BrokerInfo(pid=1, bootstrap="127.0.0.1:9", data_dir="/d", client_configs=running).save(state)
    monkeypatch.setattr(broker_mod.BrokerInfo, "alive", lambda self: True)
    code, lines = _start(args)
    assert code == 2, lines
    assert len(lines) == 1 and says in lines[0] and "laneway broker stop" in lines[0], lines


def test_a_running_broker_of_the_same_kind_is_reported(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broker_mod.BrokerInfo(pid=1, bootstrap="127.0.0.1:9", data_dir="/d").save(state)
    monkeypatch.setattr(broker_mod.BrokerInfo, "alive", lambda self: True)
    code, lines = _start([])
    assert code == 0 and lines == ["127.0.0.1:9", "already running (pid 1)"], lines
