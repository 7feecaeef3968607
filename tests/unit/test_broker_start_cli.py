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


def test_a_port_something_listens_on_is_one_line_and_leaves_nothing(state: Path) -> None:
    # seen: on the port of another Kafka, the readiness check got its answer from that broker
    # and start said it had started (its own JVM died of "Address already in use")
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        code, lines = _start(["--port", str(port)])
    assert code == 2, lines
    assert len(lines) == 1 and f"port {port} on 127.0.0.1 is in use" in lines[0], lines
    assert not list(state.parent.glob("data-*")) if state.parent.exists() else True


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


def test_a_running_broker_on_another_port_is_refused(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--port`` asks for a broker on that port: the running one on another port is not it (a
    review: its address was printed, exit 0, and the port asked for ignored)."""
    broker_mod.BrokerInfo(pid=1, bootstrap="127.0.0.1:9", data_dir="/d").save(state)
    monkeypatch.setattr(broker_mod.BrokerInfo, "alive", lambda self: True)
    code, lines = _start(["--port", "39092"])
    assert code == 2 and len(lines) == 1, lines
    assert "runs at 127.0.0.1:9 (pid 1), not on port 39092" in lines[0] and "LANEWAY_CACHE" in lines[0]
    code, lines = _start(["--port", "9"])  # its own port: the running one is it
    assert code == 0 and lines == ["127.0.0.1:9", "already running (pid 1)"], lines


def test_a_running_broker_with_another_data_dir_is_refused(
    state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--data-dir`` asks for a broker of that folder: the running one's address was printed,
    exit 0, and a later ``broker stop`` would stop someone else's broker (a review)."""
    own = tmp_path / "theirs"
    broker_mod.BrokerInfo(pid=1, bootstrap="127.0.0.1:9", data_dir=str(own)).save(state)
    monkeypatch.setattr(broker_mod.BrokerInfo, "alive", lambda self: True)
    code, lines = _start(["--data-dir", str(tmp_path / "mine")])
    assert code == 2 and len(lines) == 1, lines
    assert f"with its data in {own}, not {tmp_path / 'mine'}" in lines[0] and "LANEWAY_CACHE" in lines[0]
    code, lines = _start(["--data-dir", str(own)])  # its own folder: the running one is it
    assert code == 0 and lines == ["127.0.0.1:9", "already running (pid 1)"], lines


def test_a_relative_data_dir_is_recorded_whole(
    state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The start recorded ``--data-dir b`` as typed, so a start with ``--data-dir b`` from another
    folder was taken for it (a review): the folder is resolved first."""
    made: list[Path] = []

    class Started(Exception):
        pass

    def fake_broker(data: Path, **_: object) -> object:
        made.append(data)
        raise Started

    monkeypatch.setattr(broker_mod, "LocalBroker", fake_broker)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli.app, ["broker", "start", "--data-dir", "b"])
    assert isinstance(result.exception, Started)
    assert made == [tmp_path.resolve() / "b"]


def _left(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_a_failed_start_removes_the_data_directory_it_made(state: Path) -> None:
    (state.parent).mkdir(parents=True)
    code, lines = _start(["--port", "70000"])
    assert code == 2, lines
    assert _left(state.parent) == []  # no data-* directory left behind


@pytest.fixture
def no_jars(monkeypatch: pytest.MonkeyPatch) -> None:
    """The jars cannot be fetched: the start fails after it wrote the data dir's first files."""

    def fail(*_: object) -> Path:
        raise broker_mod.BrokerError("cannot fetch the Kafka jars")

    monkeypatch.setattr(broker_mod.jars, "ensure", fail)


def test_a_failed_start_removes_the_data_dir_it_was_told_to_make(
    state: Path, tmp_path: Path, no_jars: None
) -> None:
    code, lines = _start(["--data-dir", str(tmp_path / "new" / "data")])
    assert code == 2 and lines == ["error: cannot fetch the Kafka jars"], lines
    assert not (tmp_path / "new").exists()  # the highest directory the start made


def test_a_failed_start_keeps_what_was_in_an_existing_data_dir(
    state: Path, tmp_path: Path, no_jars: None
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    code, lines = _start(["--data-dir", str(mine)])
    assert code == 2 and lines == ["error: cannot fetch the Kafka jars"], lines
    assert _left(mine) == ["notes.txt"]  # what the start added is gone, the rest kept
    code, lines = _start([])
    assert code == 2, lines
    assert _left(state.parent) == []  # nor the broker directory it made
