"""`make demo` stays runnable: a small run of the catalog demo without Spark, on its own broker."""

from __future__ import annotations

import pytest

from laneway.demo import DemoSettings, main


def test_small_demo_without_spark(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(DemoSettings(entities=100, events=1_500, rate=3_000, invalid_share=0.004, spark=False)) == 0
    out = capsys.readouterr().out
    assert "dead-letter  6 records" in out
    assert "EQUAL (100 entities)" in out
    assert "broker stopped" in out
