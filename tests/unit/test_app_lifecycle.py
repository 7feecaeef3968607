"""An App's life without a broker: the consumers and the dead-letter producer are fakes, the
engine is real. ``stop()`` after ``start()`` drains; an App starts once; a stopped app's health
says so; ``laneway run`` refuses a module that ran its app while it was imported."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import laneway.running
from laneway import App, ConfigError, LanewayError
from laneway.lifecycle import AppStateError
from laneway.ops import cli
from tests.unit.test_processor import wait_for


class FakeSource:
    """A consumer thread that polls nothing; it records what the app asks of it."""

    made: list[FakeSource] = []
    #: when set, join() waits for it (a slow final commit)
    hold: threading.Event | None = None
    #: when set, join() raises it after the wait
    fail: BaseException | None = None

    def __init__(self, conf: dict[str, Any], topics: list[str], processor: object, **kw: Any) -> None:
        self.name = kw["name"]
        self.drained = self.stopped = False
        self.heartbeat = time.monotonic()
        self.lost_group = False
        self.paused_partitions: dict[tuple[str, int], str] = {}
        self._end = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        FakeSource.made.append(self)

    def _run(self) -> None:
        while not self._end.wait(0.01):
            self.heartbeat = time.monotonic()

    def start(self) -> None:
        self._thread.start()

    def drain(self) -> None:
        self.drained = True

    def stop(self, *, revoke_timeout: float | None = None) -> None:
        self.stopped = True
        self._end.set()

    def join(self, timeout: float | None = None) -> None:
        if FakeSource.hold is not None:
            FakeSource.hold.wait(10)
        self._thread.join(timeout)
        if FakeSource.fail is not None:
            raise FakeSource.fail

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()


class FakeLetters:
    def __init__(self, config: dict[str, Any]) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeSource]]:
    FakeSource.made = []
    FakeSource.hold = FakeSource.fail = None
    monkeypatch.setattr(laneway.running, "KafkaSource", FakeSource)
    monkeypatch.setattr(laneway.running, "KafkaDeadLetters", FakeLetters)
    monkeypatch.setattr(App, "check", lambda self: None)  # no broker to ask
    yield FakeSource.made
    FakeSource.hold = FakeSource.fail = None


def _app(consumers: int = 2) -> App:
    app = App("life", bootstrap_servers="127.0.0.1:1", consumers=consumers, gc_tuning=False)
    app.handler("t")(print)
    return app


def test_stop_after_start_drains_and_shuts_the_app_down(fakes: list[FakeSource]) -> None:
    # stop() only set a flag that run() watched: after start() the app kept consuming
    app = _app().start()
    assert app.state == "running" and app.health() is None
    app.stop()  # returns at once; the shutdown runs in the background
    wait_for(lambda: app.state == "stopped")
    assert len(fakes) == 2
    assert all(src.drained and src.stopped and not src.alive for src in fakes)
    assert app.health() == "stopped"


def test_a_stopped_app_s_health_says_stopped_not_a_crash(fakes: list[FakeSource]) -> None:
    app = _app().start()
    app.shutdown()
    # was "a consumer thread has stopped", the text of a crash inside Laneway
    assert app.state == "stopped"
    assert app.health() == "stopped"


def test_shutdown_waits_for_the_shutdown_a_stop_began(fakes: list[FakeSource]) -> None:
    app = _app().start()
    hold = FakeSource.hold = threading.Event()
    app.stop()
    wait_for(lambda: all(src.stopped for src in fakes))  # the stop's shutdown is under way
    assert app.state == "stopping" and app.health() == "stopping"
    threading.Timer(0.2, hold.set).start()
    app.shutdown()
    assert hold.is_set() and app.state == "stopped"  # returned once the other one was done


def test_what_the_stop_s_shutdown_raised_reaches_the_shutdown_call_that_waited(
    fakes: list[FakeSource],
) -> None:
    app = _app().start()
    hold = FakeSource.hold = threading.Event()
    FakeSource.fail = RuntimeError("closing the consumer failed")
    app.stop()
    wait_for(lambda: all(src.stopped for src in fakes))
    threading.Timer(0.2, hold.set).start()
    with pytest.raises(RuntimeError, match="closing the consumer failed"):
        app.shutdown()
    assert app.state == "stopped"


def test_a_second_start_is_refused_and_starts_nothing(fakes: list[FakeSource]) -> None:
    app = _app().start()
    try:
        with pytest.raises(AppStateError, match="already running") as info:
            app.start()
        assert isinstance(info.value, LanewayError) and isinstance(info.value, RuntimeError)
        assert len(fakes) == 2  # one engine's consumers, not two
    finally:
        app.shutdown()


def test_a_start_after_the_shutdown_is_refused(fakes: list[FakeSource]) -> None:
    app = _app().start()
    app.shutdown()
    with pytest.raises(AppStateError, match="shut down; an App runs once"):
        app.start()
    assert len(fakes) == 2 and app.state == "stopped"


def test_a_start_that_failed_on_a_setting_may_be_tried_again(
    fakes: list[FakeSource], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = _app(consumers=1)
    calls: list[int] = []

    def check(self: App) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ConfigError("topic", "topic 't' does not exist")

    monkeypatch.setattr(App, "check", check)
    with pytest.raises(ConfigError):
        app.start()
    assert app.state == "new" and fakes == []
    app.start()
    try:
        assert app.state == "running" and len(fakes) == 1
    finally:
        app.shutdown()


def test_a_halt_after_start_shuts_the_app_down(fakes: list[FakeSource]) -> None:
    app = _app().start()
    app._on_fatal(RuntimeError("could not dead-letter"))  # what the engine calls on a halt
    wait_for(lambda: app.state == "stopped")
    assert all(src.stopped and not src.alive for src in fakes)
    assert app.health() == "halted: could not dead-letter"


NOGUARD = """
import threading
from laneway import App

app = App("noguard", bootstrap_servers="127.0.0.1:1", gc_tuning=False)
app.handler("t")(print)
errors = []


def _try(start):
    try:
        start()
    except Exception as exc:
        return exc


{call}
"""


@pytest.mark.parametrize(
    "call",
    [
        # an app.run() without `if __name__ == "__main__":`, stopped by its signal
        "threading.Timer(0.1, app.stop).start()\napp.run()",
        "app.start()",
        # in a thread the module starts: a review saw it run and commit before the refusal
        "t = threading.Thread(target=lambda: errors.append(_try(app.start)))\nt.start()\nt.join()\n"
        "raise errors[0]",
    ],
)
def test_laneway_run_refuses_an_app_its_module_ran_at_import(
    fakes: list[FakeSource], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    # laneway run started the stopped app a second time; its consumers were never shut down. Then
    # it refused it only once the module's app.run() had run and processed records, until a signal
    # (a review): the start raises at once while laneway run imports the module
    name = f"noguard{abs(hash(call))}"
    (tmp_path / f"{name}.py").write_text(NOGUARD.format(call=call))
    monkeypatch.syspath_prepend(str(tmp_path))
    if not any(c.name == "run" for c in cli.app.registered_commands):
        cli._register_subcommands()
    result = CliRunner().invoke(cli.app, ["run", f"{name}:app"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    says = f"App 'noguard' was started while `laneway run` imported {name}:app"
    assert len(errors) == 1 and errors[0].startswith(f"error: {says}"), result.output
    assert 'if __name__ == "__main__":' in errors[0]
    assert fakes == []  # never started: no consumer ran
