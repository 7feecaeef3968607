"""An :class:`~laneway.App`'s life: new, running, stopping, stopped, once.

``start()`` claims the start (a second one, or one after the stop, raises
:class:`AppStateError`); ``stop()`` sets :attr:`Lifecycle.stopping` (an ``Event.set``: no
lock, so a signal handler may call it); a watcher thread the start leaves calls
``shutdown()`` once a stop is asked, and so may ``run()``, ``run_until()`` and the user: the
first call claims the shutdown and does it, the others wait for it and raise what it raised
(the watcher logs it when it did the shutdown itself).

Threads: the user's (start, stop, shutdown, state), a signal handler (stop), the engine's and
the consumers' (a halt asks a stop), the watcher. ``_lock`` guards ``_started`` and
``_closing``; the two events are thread-safe.

:func:`tune_gc` is the start's tuning of the garbage collector (``gc_tuning=True``).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Literal

from laneway.errors import LanewayError

__all__ = ["GC_THRESHOLD", "AppState", "AppStateError", "Lifecycle", "importing", "tune_gc"]

logger = logging.getLogger(__name__)

#: ``new``: not started; ``running``: started, no stop asked; ``stopping``: a stop was asked
#: (``stop()``, a signal, a halt) and the drain runs or is about to; ``stopped``: shut down
AppState = Literal["new", "running", "stopping", "stopped"]


class AppStateError(LanewayError, RuntimeError):
    """An App was started twice, or after it stopped: an App runs once."""


#: the target ``laneway run`` imports (``module:app``), while it imports it: process-wide, so
#: an app started in a thread the module starts is refused too (a context variable is not seen
#: by a new thread)
_importing: list[str] = []
_importing_lock = threading.Lock()


@contextlib.contextmanager
def importing(target: str) -> Iterator[None]:
    """While ``laneway run`` imports ``target``'s module: an app started meanwhile (an
    ``app.run()`` at a module's top level, with no ``if __name__`` guard, or an ``app.start()``
    in a thread it starts) raises :class:`AppStateError` at once, before it runs anything; it
    ran, and processed records, until a signal stopped it (a review)."""
    with _importing_lock:
        _importing.append(target)
    try:
        yield
    finally:
        with _importing_lock:
            _importing.remove(target)


class Lifecycle:
    """The states of one app named ``name`` (see the module's docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        #: a stop was asked: ``run()``, ``run_until()`` or the watcher then shut the app down
        self.stopping = threading.Event()
        #: the shutdown is done
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        self._closing = False
        self._watcher: threading.Thread | None = None
        #: what the shutdown raised: the shutdown() calls that waited for it raise it too
        self.failure: BaseException | None = None

    @property
    def state(self) -> AppState:
        if self.stopped.is_set():
            return "stopped"
        with self._lock:
            started, closing = self._started, self._closing
        if closing or (started and self.stopping.is_set()):
            return "stopping"
        return "running" if started else "new"

    def claim_start(self) -> None:
        """Mark the app started, or raise :class:`AppStateError` when it was started or shut down,
        or while ``laneway run`` imports its module (:func:`importing`)."""
        with _importing_lock:
            target = _importing[-1] if _importing else None
        if target is not None:
            raise AppStateError(
                f"App {self.name!r} was started while `laneway run` imported {target} (an app.run() or "
                'app.start() at a module\'s top level): guard that call with `if __name__ == "__main__":` '
                "and `laneway run` runs the app"
            )
        with self._lock:
            if self._closing or self.stopped.is_set():
                raise AppStateError(
                    f"App {self.name!r} has been shut down; an App runs once: build a new one to run again"
                )
            if self._started:
                raise AppStateError(
                    f"App {self.name!r} is already running (App.start() or App.run() was called before); "
                    "an App starts once"
                )
            self._started = True

    def abandon_start(self) -> None:
        """The start failed before anything ran (a bad setting, no broker): it may be tried again."""
        with self._lock:
            self._started = False

    def claim_shutdown(self) -> bool:
        """True for the first caller, which shuts down and then calls :meth:`done`; the others
        get False and wait for :attr:`stopped`."""
        self.stopping.set()  # the watcher wakes up and ends (its own shutdown call waits)
        with self._lock:
            first = not self._closing
            self._closing = True
        return first

    def done(self) -> None:
        self.stopped.set()

    def watch(self, shutdown: Callable[[], None]) -> None:
        """Call ``shutdown`` on a daemon thread once a stop is asked: an app started with
        ``start()`` alone shuts down on ``stop()`` or a halt, as under ``run()``."""
        if self._watcher is not None:
            return

        def watcher() -> None:
            self.stopping.wait()
            with self._lock:
                if self._closing:  # a shutdown() call does it, and reports what fails
                    return
            try:
                shutdown()
            except BaseException:
                logger.exception("%s: the shutdown failed", self.name)

        self._watcher = threading.Thread(target=watcher, name="laneway-stopper", daemon=True)
        self._watcher.start()


#: the youngest generation is collected after this many allocations (CPython's default: 700)
GC_THRESHOLD = (20_000, 20, 20)


def tune_gc() -> None:
    """Tune CPython's collector for a stream of short-lived events (``gc_tuning=True``).

    Every record allocates a few objects that live for milliseconds. At the default
    threshold (700) the collector runs every ~100 records and finds most of them still
    alive, so it scans them, promotes them, and scans them again a generation up. At 20,000
    most are gone before it looks. ``gc.freeze()`` moves what start-up allocated (modules,
    settings, the handlers' state) out of reach of full collections. Measured: +24%
    records/s for a no-op handler (BENCHMARKS.md). Cyclic garbage lives a little longer;
    reference counting frees everything else at once, as before. Process-wide: an app
    that shares its process with code tuned otherwise passes ``gc_tuning=False``.
    """
    global _tuned, _threshold, _frozen_before
    with _gc_lock:
        if not _tuned:
            _threshold = gc.get_threshold()
            _frozen_before = gc.get_freeze_count() > 0
        _tuned += 1
        gc.collect()  # what start-up left as garbage is freed, not frozen
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLD)


def restore_gc() -> None:
    """Undo :func:`tune_gc` as the app stops (the last of the process's tuned apps): the
    frozen objects go back to the collector, and the threshold to what it was. Objects the
    process froze itself before the first start stay frozen, with what the start froze
    (``gc.unfreeze`` cannot tell them apart).

    Left frozen, they were never finalized, not even at the interpreter's exit: a module's
    buffered file, written by a handler, lost its last buffer (a review: 695 of 300,000
    records' lines, their offsets committed) and a ``__del__`` never ran."""
    global _tuned
    with _gc_lock:
        if not _tuned:
            return
        _tuned -= 1
        if not _tuned:
            if not _frozen_before:  # the process's own freeze (before a fork, say) stays
                gc.unfreeze()
            gc.set_threshold(*_threshold)


#: apps of this process that tuned the collector and have not stopped, and the threshold
#: before the first of them (:func:`restore_gc`)
_tuned = 0
_threshold: tuple[int, int, int] = gc.get_threshold()
#: whether the process had frozen objects itself before the first tuned start
_frozen_before = False
_gc_lock = threading.Lock()
