"""``gc_tuning``: the start freezes what start-up made and raises the threshold; the stop of
the process's last tuned app gives both back (frozen objects are never finalized, not even at
the interpreter's exit: a module's buffered file lost its last buffer)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from laneway import lifecycle
from laneway.lifecycle import GC_THRESHOLD, restore_gc, tune_gc


@pytest.fixture(autouse=True)
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    before = gc.get_threshold()
    monkeypatch.setattr(lifecycle, "_tuned", 0)  # as in a fresh process: no app tuned it yet
    monkeypatch.setattr(lifecycle, "_frozen_before", False)
    gc.unfreeze()
    yield
    while lifecycle._tuned:
        restore_gc()
    gc.unfreeze()
    gc.set_threshold(*before)


def test_the_last_stop_gives_back_the_frozen_objects_and_the_threshold() -> None:
    gc.set_threshold(700, 10, 10)
    tune_gc()
    kept = object()  # made before the second start: frozen by it
    tune_gc()  # a second app of the same process
    assert gc.get_freeze_count() > 0 and gc.get_threshold() == GC_THRESHOLD
    restore_gc()  # the first app stops: the other still runs tuned
    assert gc.get_freeze_count() > 0 and gc.get_threshold() == GC_THRESHOLD
    restore_gc()
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == (700, 10, 10)
    restore_gc()  # once more: nothing tuned, nothing changes
    assert gc.get_threshold() == (700, 10, 10)
    del kept


def test_a_freeze_the_process_made_itself_stays_frozen() -> None:
    """Code that froze its objects before a fork keeps them frozen when the app stops (a review:
    the stop unfroze them); the threshold still comes back."""
    gc.freeze()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    tune_gc()
    restore_gc()
    assert gc.get_freeze_count() >= frozen
    assert gc.get_threshold() != GC_THRESHOLD
