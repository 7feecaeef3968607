"""App settings and start-up tuning that need no broker."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from laneway import App, ConfigError
from laneway.app import GC_THRESHOLD, tune_gc


@pytest.fixture
def restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_gc_tuning_freezes_start_up_objects_and_raises_the_threshold(restore_gc: None) -> None:
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    assert gc.get_freeze_count() == 0
    tune_gc()
    assert gc.get_threshold() == GC_THRESHOLD
    assert GC_THRESHOLD[0] > 700
    assert gc.get_freeze_count() > 1_000  # the modules and objects start-up made


def test_gc_tuning_is_a_setting_on_by_default() -> None:
    assert App("a", bootstrap_servers="127.0.0.1:9092").settings.gc_tuning is True
    assert App("a", bootstrap_servers="127.0.0.1:9092", gc_tuning=False).settings.gc_tuning is False
    with pytest.raises(ConfigError) as info:
        App("a", bootstrap_servers="127.0.0.1:9092", gc_tuning="sometimes")  # type: ignore[arg-type]
    assert info.value.field == "gc_tuning"
