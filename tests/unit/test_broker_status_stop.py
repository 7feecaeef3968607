"""`laneway broker status` and `stop` do what docs/operations.md says: status prints the
address, pid and data directory on one line, then the user lines (the page said it printed the
start's lines); stop removes a data directory under the cache only (the page said it removed
the broker's files, a --data-dir elsewhere too, and a sibling of the cache's folder whose name
began the same way was removed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from laneway.ops import broker as broker_mod
from laneway.ops import cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache" / "broker" / "state.json"
    monkeypatch.setattr(cli, "_state_file", lambda: path)
    return path


def _documented_status() -> tuple[list[str], list[str]]:
    """The command and the output lines of the page's ``$ laneway broker status`` example."""
    text = DOC.read_text()
    block = re.search(r"```text\n\$ (laneway broker status)\n(.*?)```", text, re.DOTALL)
    assert block is not None, "docs/operations.md has no `$ laneway broker status` example"
    return block.group(1).split(), block.group(2).splitlines()


def test_status_prints_what_the_page_shows(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    command, lines = _documented_status()
    first = re.fullmatch(r"running: (\S+) \(pid (\d+), data (\S+)\)", lines[0])
    assert first is not None, lines[0]
    users = dict(line.split(": ", 1) for line in lines[1:])
    info = broker_mod.BrokerInfo(
        pid=int(first.group(2)), bootstrap=first.group(1), data_dir=first.group(3), client_configs=users
    )
    info.save(state)
    monkeypatch.setattr(broker_mod.BrokerInfo, "alive", lambda self: True)
    monkeypatch.setattr(broker_mod, "wait_for_metadata", lambda *a, **k: True)
    monkeypatch.setattr(cli, "_admin", lambda info: None)
    result = CliRunner().invoke(cli.app, command[1:])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == lines


def _stop(state: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    data_dir.mkdir(parents=True)
    (data_dir / "server.log").write_text("...")
    broker_mod.BrokerInfo(pid=1, bootstrap="127.0.0.1:9", data_dir=str(data_dir)).save(state)
    monkeypatch.setattr(broker_mod, "stop_recorded", lambda info: True)
    result = CliRunner().invoke(cli.app, ["broker", "stop"])
    assert result.exit_code == 0, result.output
    assert not state.exists()
    return result.stdout.splitlines()


def test_stop_removes_a_data_directory_under_the_cache(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = state.parent / "data-x1y2"
    assert _stop(state, data, monkeypatch) == ["stopped broker pid 1 at 127.0.0.1:9"]
    assert not data.exists()


@pytest.mark.parametrize("where", ["elsewhere/kafka-data", "cache/broker-mine/data"])
def test_stop_keeps_a_data_dir_elsewhere(state: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    data = state.parents[2] / where  # another folder; a sibling of the cache's, its name a prefix
    _stop(state, data, monkeypatch)
    assert (data / "server.log").read_text() == "..."
