"""Ctrl-C: the first stops gracefully, the second exits 130 at once (laneway.interrupts).

The subprocess tests run ``laneway run`` on an app whose drain never ends (a fake: no broker),
as a handler that blocks would make it; only a forced exit ends the process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from laneway import interrupts
from laneway.interrupts import (
    FIRST_MESSAGE,
    FORCED_MESSAGE,
    Interrupts,
    graceful_interrupts,
    run_stoppable,
)

ROOT = Path(__file__).resolve().parents[2]

#: an App whose start does nothing and whose shutdown waits forever (a drain a handler blocks), in
#: timed waits as the real drain's: one without a timeout would run the handler of a second Ctrl-C
#: that came just before the wait began (see the test of run_stoppable's) only once the wait ended
_BLOCKING_APP = """
import threading
from laneway import App

class BlockingApp(App):
    def start(self):
        print("started", flush=True)
        return self

    def shutdown(self):
        print("draining", flush=True)
        while True:
            threading.Event().wait(0.1)

app = BlockingApp("blocking", bootstrap_servers="127.0.0.1:1")
"""


def _wait_for(stream: IO[str], line: str) -> None:
    for got in stream:
        if got.strip() == line:
            return
    raise AssertionError(f"the process ended before printing {line!r}")


def _laneway_run(tmp_path: Path) -> subprocess.Popen[str]:
    (tmp_path / "blocking_app.py").write_text(_BLOCKING_APP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    return subprocess.Popen(
        [sys.executable, "-m", "laneway.ops.cli", "run", "blocking_app:app", "--log-level", "WARNING"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_ctrl_c_exits_130_while_the_drain_blocks(tmp_path: Path, first: signal.Signals) -> None:
    proc = _laneway_run(tmp_path)
    assert proc.stdout is not None
    try:
        _wait_for(proc.stdout, "started")
        proc.send_signal(first)
        _wait_for(proc.stdout, "draining")  # the graceful stop began, and blocks
        proc.send_signal(signal.SIGINT)
        # a generous guard against a hang, not a timing assertion: before the fix it never exits
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    _, stderr = proc.communicate()
    assert code == 130, stderr
    lines = stderr.splitlines()
    # the hint is for a Ctrl-C; a SIGTERM (from a supervisor) gets the log line only
    assert lines.count(FIRST_MESSAGE) == (1 if first == signal.SIGINT else 0), stderr
    assert lines[-1] == FORCED_MESSAGE, stderr


def test_the_first_signal_stops_once_and_a_repeated_sigterm_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    stops: list[int] = []
    exits: list[int] = []

    def fake_exit(code: int) -> None:
        exits.append(code)

    monkeypatch.setattr(interrupts.os, "_exit", fake_exit)
    state = Interrupts(lambda: stops.append(1))
    state.handle(signal.SIGINT)
    state.handle(signal.SIGTERM)
    assert stops == [1] and exits == [] and state.received == signal.SIGINT
    state.handle(signal.SIGINT)
    assert stops == [1] and exits == [130]
    assert capfd.readouterr().err.splitlines() == [FIRST_MESSAGE, FORCED_MESSAGE]


def test_a_command_gives_its_own_last_words_to_a_forced_exit(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """``dlq redrive`` says what was recorded, not the app's line about records consumed again."""
    exits: list[int] = []
    monkeypatch.setattr(interrupts.os, "_exit", exits.append)
    done = [0]
    state = Interrupts(lambda: None, forced_message=lambda: f"exiting now: {done[0]} recorded")
    state.handle(signal.SIGINT)
    done[0] = 500
    state.handle(signal.SIGINT)
    assert exits == [130]
    assert capfd.readouterr().err.splitlines() == [FIRST_MESSAGE, "exiting now: 500 recorded"]


def test_the_context_puts_the_handlers_back() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with graceful_interrupts(lambda: None) as state:
        assert signal.getsignal(signal.SIGINT) == state.handle
        assert signal.getsignal(signal.SIGTERM) == state.handle
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


_STOPPABLE = """
import threading
from laneway.interrupts import run_stoppable

def work(stop):
    print("working", flush=True)
    stop.wait()
    print("draining", flush=True)
    threading.Event().wait()  # a batch that never lands

run_stoppable(work)
"""


def test_run_stoppable_a_second_ctrl_c_exits_130_while_the_work_blocks(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _STOPPABLE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        _wait_for(proc.stdout, "working")
        proc.send_signal(signal.SIGINT)
        _wait_for(proc.stdout, "draining")  # the work saw the stop, and blocks
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)  # a guard against a hang, not a timing assertion
    finally:
        proc.kill()
        proc.wait()
    _, stderr = proc.communicate()
    assert code == 130, stderr
    assert stderr.splitlines() == [FIRST_MESSAGE, FORCED_MESSAGE]


#: the frame the main thread is in while ``Thread.join`` waits (3.11, 3.12: a Python method; later: join's)
_JOIN_WAIT = "_wait_for_tstate_lock" if hasattr(threading.Thread, "_wait_for_tstate_lock") else "join"


def test_run_stoppable_runs_the_handler_of_a_signal_that_interrupts_no_wait() -> None:
    """A signal interrupts the main thread's wait only if the wait has begun: one the kernel hands
    to the main thread just before (past the check for signals: a preemption there under load, the
    CI hang of a second Ctrl-C) interrupts nothing, nor one taken on another thread, as this one is,
    once the main thread waits for the work. A join without a timeout ran the handler only once the
    work ended: ``stop`` was never set."""
    main = threading.main_thread().ident
    assert main is not None

    def work(stop: threading.Event) -> bool:
        while sys._current_frames()[main].f_code.co_name != _JOIN_WAIT:
            time.sleep(0.001)  # until the main thread waits in the join
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # its C handler runs here
        return stop.wait(60)  # a guard against a hang, not a timing assertion

    assert run_stoppable(work) == (True, signal.SIGINT)


def test_run_stoppable_returns_the_result_and_the_signal_and_raises_the_error() -> None:
    def interrupted(stop: threading.Event) -> bool:
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs on the main thread, in the join
        return stop.wait(60)

    assert run_stoppable(interrupted) == (True, signal.SIGINT)
    assert run_stoppable(lambda stop: stop.is_set()) == (False, None)

    def failing(stop: threading.Event) -> None:
        raise ValueError("no such topic")

    with pytest.raises(ValueError, match="no such topic"):
        run_stoppable(failing)
