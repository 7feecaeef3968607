"""`laneway broker start --secure`: a detached secured broker, its client files, status and stop."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from laneway.ops import broker as broker_mod
from laneway.ops.cli import app
from laneway.ops.secured import read_properties


def test_start_secure_prints_the_client_files_and_serves_only_sasl_ssl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_cache = broker_mod.jars.cache_dir()
    monkeypatch.setenv("LANEWAY_CACHE", str(tmp_path))
    target = broker_mod.jars.KAFKA.libs(tmp_path)  # the already fetched jars, through a link
    target.parent.mkdir(parents=True)
    target.symlink_to(broker_mod.jars.KAFKA.libs(real_cache))
    (target.parent / ".complete").write_text("x")

    runner = CliRunner()
    started = runner.invoke(app, ["broker", "start", "--secure"])
    assert started.exit_code == 0, started.output
    info = broker_mod.BrokerInfo.load(tmp_path / "broker" / "state.json")
    assert info is not None and info.alive()
    try:
        bootstrap, *rest = started.stdout.strip().splitlines()
        assert bootstrap == info.bootstrap
        files = dict(line.split(": ", 1) for line in rest)
        assert set(files) == {"admin", "app", "reader"}
        settings = {user: read_properties(Path(path)) for user, path in files.items()}
        for user, path in files.items():
            assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
            assert settings[user]["sasl.username"] == user
            assert settings[user]["security.protocol"] == "SASL_SSL"
            assert Path(settings[user]["ssl.ca.location"]).is_file()
            # printed: the paths; never a password
            assert settings[user]["sasl.password"] not in started.output
        md = AdminClient({"bootstrap.servers": bootstrap, **settings["admin"]}).list_topics(timeout=20)
        assert list(md.brokers) == [1]
        # a client without credentials gets nothing from the SASL_SSL listener
        plain = AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 2000})
        with pytest.raises(KafkaException):
            plain.list_topics(timeout=5)

        status = runner.invoke(app, ["broker", "status"])
        assert status.exit_code == 0, status.output
        assert f"app: {files['app']}" in status.stdout
        assert all(s["sasl.password"] not in status.output for s in settings.values())
    finally:
        stopped = runner.invoke(app, ["broker", "stop"])
    assert stopped.exit_code == 0
    assert not info.alive()
