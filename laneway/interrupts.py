"""Ctrl-C for the long-running commands: the first stops gracefully, the second exits now.

    with graceful_interrupts(app.stop):
        app.run(install_signal_handlers=False)

    result, received = run_stoppable(lambda stop: run_pipeline(settings, stop_event=stop))

The first SIGINT (or SIGTERM) calls ``stop`` once; a SIGINT also says on stderr, once,
``stopping... (Ctrl-C again to exit now)`` (above the progress bars of a rich live display on a
terminal, through its console: see :func:`_say_first`). A SIGINT after that exits the process at once
with status 130, without waiting for the drain, the final commits or any thread: records
processed but not committed yet are consumed again on the next start, which the
at-least-once contract allows (a command for which that line is wrong gives its own,
``forced_message``). A repeated SIGTERM changes nothing (supervisors send one,
then SIGKILL). ``stop`` may raise (``KeyboardInterrupt`` for a command whose graceful stop
is unwinding its main thread): the exception comes out where the main thread was.

Handlers can only be set on the main thread; elsewhere the context does nothing. Leaving
it puts the handlers back as they were. :func:`run_stoppable` runs work that stops on an
event (a Spark query, say) on a worker thread, so that the main thread keeps the handlers
while the work's own code would set others.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any, TypeVar

__all__ = [
    "FIRST_MESSAGE",
    "FORCED_EXIT",
    "FORCED_MESSAGE",
    "Interrupts",
    "graceful_interrupts",
    "run_stoppable",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: seconds: how late at worst :func:`run_stoppable`'s main thread runs the handler of a signal
#: that did not interrupt its wait (one that did runs at once)
_JOIN_SLICE = 0.1

#: the exit status of a forced exit (128 + SIGINT, as shells report an interrupted command)
FORCED_EXIT = 130
FIRST_MESSAGE = "stopping... (Ctrl-C again to exit now)"
FORCED_MESSAGE = (
    "exiting now: records processed but not committed yet are consumed again on the next start "
    "(at-least-once)"
)


class Interrupts:
    """The state the signal handlers share. Only the main thread touches it: Python runs
    signal handlers there, between two bytecodes of whatever the main thread was doing."""

    def __init__(
        self,
        stop: Callable[[], None],
        *,
        before_exit: Callable[[], None] | None = None,
        forced_message: Callable[[], str] | None = None,
    ) -> None:
        self._stop = stop
        self._before_exit = before_exit
        self._forced_message = forced_message
        #: the first stop signal received, None until then
        self.received: int | None = None

    def handle(self, signum: int, frame: FrameType | None = None) -> None:
        """The handler of SIGINT and SIGTERM."""
        if self.received is None:
            self.received = signum
            logger.info("received %s: shutting down", signal.Signals(signum).name)
            if signum == signal.SIGINT:
                _say_first(FIRST_MESSAGE)
            self._stop()
        elif signum == signal.SIGINT:
            self.exit_now()

    def exit_now(self) -> None:
        """Exit the process at once with :data:`FORCED_EXIT`."""
        message = FORCED_MESSAGE
        if self._forced_message is not None:
            with suppress(Exception):  # the exit matters more than the words
                message = self._forced_message()
        _say(message)
        if self._before_exit is not None:
            with suppress(Exception):  # the exit matters more than the clean-up
                self._before_exit()
        for stream in (sys.stdout, sys.stderr):
            with suppress(Exception):  # e.g. a reentrant call: the main thread was writing to it
                stream.flush()
        os._exit(FORCED_EXIT)


def _say(line: str) -> None:
    """One line on stderr, written straight to the file descriptor: safe in a handler that
    may run while the main thread is half-way through writing to ``sys.stderr``."""
    with suppress(OSError):
        os.write(2, f"{line}\n".encode())


def _say_first(line: str) -> None:
    """The first Ctrl-C's line. While a rich live display is on a terminal (the progress bars of
    ``laneway dlq redrive`` or ``laneway catalog generate``), it redraws its bars in place, over a
    line written around them: ``sys.stderr`` is then rich's proxy, which prints through the
    display's console, above the bars, so the line goes there. Otherwise it is :func:`_say`'s.

    The handler runs on the main thread, which may be inside that console: its lock is
    reentrant, and a line printed there lands beside what the main thread prints. The forced
    exit's line stays :func:`_say`'s: nothing redraws after it, and the exit matters more."""
    proxies = sys.modules.get("rich.file_proxy")  # no live display without it
    stream = sys.stderr
    if proxies is not None and isinstance(stream, proxies.FileProxy):
        try:
            stream.write(f"{line}\n")  # a whole line: printed at once
            stream.flush()
            return
        except Exception:  # the words matter more than where they land
            logger.debug("the live display's console refused the line", exc_info=True)
    _say(line)


@contextmanager
def graceful_interrupts(
    stop: Callable[[], None],
    *,
    before_exit: Callable[[], None] | None = None,
    forced_message: Callable[[], str] | None = None,
) -> Iterator[Interrupts]:
    """SIGINT and SIGTERM call ``stop`` once; a second SIGINT exits with status 130 at once,
    after calling ``before_exit`` (e.g. to kill a child process the exit would orphan). The
    forced exit says :data:`FORCED_MESSAGE`, or what ``forced_message()`` returns."""
    interrupts = Interrupts(stop, before_exit=before_exit, forced_message=forced_message)
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    before: dict[signal.Signals, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        before[signum] = signal.signal(signum, interrupts.handle)
    try:
        yield interrupts
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def run_stoppable(
    work: Callable[[threading.Event], T], *, before_exit: Callable[[], None] | None = None
) -> tuple[T, int | None]:
    """Run ``work(stop)`` on a worker thread while the main thread holds the handlers of
    :func:`graceful_interrupts`: the first signal sets ``stop``, a second Ctrl-C exits 130.

    Returns what ``work`` returned and the first signal received (None when none came);
    raises what ``work`` raised.
    """
    stop = threading.Event()
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = work(stop)
        except BaseException as exc:  # handed to the main thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="laneway-stoppable", daemon=True)
    with graceful_interrupts(stop.set, before_exit=before_exit) as interrupts:
        thread.start()
        # Timed joins, not one join without a timeout: a signal that interrupts no wait (it came
        # between the check for signals and the wait's start, where load preempts the main thread,
        # or on another thread) gets its handler run only when the join returns: never, for a
        # second Ctrl-C while the work blocks. A timed join returns, and the handler runs then.
        while thread.is_alive():
            thread.join(_JOIN_SLICE)
    if "error" in outcome:
        raise outcome["error"]
    result: T = outcome["result"]
    return result, interrupts.received
