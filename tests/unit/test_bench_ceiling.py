"""The CPython ceiling benchmark measures what it says (no timing asserted, only bounds
that sleeping guarantees)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.ceiling import main


def test_each_pool_runs_and_none_beats_the_ideal(tmp_path: Path) -> None:
    out = tmp_path / "ceiling.json"
    code = main(
        [
            "--records=400",
            "--concurrency=8",
            "--sleep-ms=2",
            "--work-us=0,5",
            "--repeats=1",
            f"--json={out}",
        ]
    )
    assert code == 0
    result = json.loads(out.read_text())
    assert result["ideal"] == 8 / 0.002
    rows = result["rows"]
    assert [(r["pool"], r["work_us"]) for r in rows] == [
        (pool, work) for work in (0.0, 5.0) for pool in ("uvloop", "asyncio", "threads")
    ]
    for row in rows:
        # every record waits out a 2 ms sleep on one of 8 workers: no run can beat 8 / 2 ms
        assert 0 < row["rate"] <= result["ideal"] * 1.02, row
        assert row["cpu_us_per_record"] > 0
