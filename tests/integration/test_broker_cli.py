"""`laneway broker start|status|stop` through the CLI runner, and the launcher's error path."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from laneway.ops import broker as broker_mod
from laneway.ops.cli import app


def _cache_with_the_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A temporary cache (``LANEWAY_CACHE``) sharing the already fetched Kafka jars."""
    real_cache = broker_mod.jars.cache_dir()
    monkeypatch.setenv("LANEWAY_CACHE", str(tmp_path))
    libs = broker_mod.jars.KAFKA.libs(real_cache)
    target = broker_mod.jars.KAFKA.libs(tmp_path)
    target.parent.mkdir(parents=True)
    target.symlink_to(libs)
    (target.parent / ".complete").write_text("x")


def test_start_status_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _cache_with_the_jars(tmp_path, monkeypatch)
    runner = CliRunner()
    started = runner.invoke(app, ["broker", "start"])
    assert started.exit_code == 0, started.output
    bootstrap = started.stdout.strip().splitlines()[0]
    assert bootstrap.startswith("127.0.0.1:")
    info = broker_mod.BrokerInfo.load(tmp_path / "broker" / "state.json")
    assert info is not None and info.alive() and info.bootstrap == bootstrap
    try:
        status = runner.invoke(app, ["broker", "status", "--quiet"])
        assert status.exit_code == 0 and status.stdout.strip() == bootstrap
        again = runner.invoke(app, ["broker", "start"])
        assert again.exit_code == 0 and again.stdout.strip() == bootstrap  # no second broker
    finally:
        stopped = runner.invoke(app, ["broker", "stop"])
    assert stopped.exit_code == 0
    assert not info.alive()
    assert not Path(f"/proc/{info.pid}").exists() or not info.alive()
    assert runner.invoke(app, ["broker", "status"]).exit_code == 1


def test_a_start_on_a_taken_port_fails_and_leaves_no_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cache_with_the_jars(tmp_path, monkeypatch)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["broker", "start", "--port", str(port), "--timeout", "60"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: "), result.output
    assert not (tmp_path / "broker" / "state.json").exists()
    left = sorted(p.name for p in (tmp_path / "broker").glob("data-*"))
    assert left == [], f"the failed start left {left}"


def test_start_failure_quotes_the_log(tmp_path: Path) -> None:
    broker = broker_mod.LocalBroker(tmp_path / "data", heap="1m")  # the JVM refuses a 1 MB heap
    with pytest.raises(broker_mod.BrokerError) as err:
        broker.start(timeout=30)
    assert "heap" in str(err.value).lower()
    assert broker.proc is None or broker.proc.poll() is not None
    assert os.path.isdir(tmp_path / "data")


@pytest.mark.parametrize("command", ["start", "status", "stop"])
def test_each_broker_command_has_help_with_an_example(command: str) -> None:
    result = CliRunner().invoke(app, ["broker", command, "--help"])
    assert result.exit_code == 0
    assert "Example: " in result.stdout and "laneway broker" in result.stdout
