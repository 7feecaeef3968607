"""The benchmark harness still works: a tiny quick-mode run on the in-venv contenders.

No timed assertions: only that every run finished and passed its own correctness checks
(count equal to the records produced, no duplicates, per-key order where promised, the
group's commits at the topic's end). quixstreams needs its own venv (bench/.venv-quix),
so this test names the contenders it runs instead of depending on that venv.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.ab import main as ab_main
from bench.adversity import main as adversity_main

CONTENDERS = ["raw", "partition-seq", "laneway-key", "laneway-unordered", "arroyo"]


def test_quick_mode_on_a_tiny_input(kafka_bootstrap: str, tmp_path: Path) -> None:
    code = main(
        [
            "--mode=quick",
            f"--bootstrap={kafka_bootstrap}",
            f"--contenders={','.join(CONTENDERS)}",
            "--scenarios=noop,io",
            "--records=2000",
            "--repeats=1",
            "--io-concurrency=64",
            f"--out={tmp_path}",
        ]
    )
    results = json.loads((tmp_path / "results.json").read_text())
    noop = results["scenarios"]["noop"]["runs"]
    assert sorted(r["contender"] for r in noop) == sorted(CONTENDERS)
    for run in noop:
        assert run["error"] is None, run["error"]
        assert run["correct"], (run["contender"], run["notes"])
        assert run["count"] == 2000 and run["distinct"] == 2000 and run["duplicates"] == 0
        assert sum(run["committed"]) == 2000
    io = results["scenarios"]["io"]["runs"]
    assert {r["contender"] for r in io} == set(CONTENDERS)
    assert all(r["correct"] for r in io), [(r["contender"], r["notes"]) for r in io if not r["correct"]]
    assert code == 0
    assert (tmp_path / "REPORT.md").read_text().count("ok (1/1)") >= len(CONTENDERS)


def test_code_against_code_side_by_side(kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(Path(__file__).resolve().parents[2])
    code = ab_main(
        [
            f"--bootstrap={kafka_bootstrap}",
            "--records=2000",
            "--repeats=1",
            f"ceiling=raw@{root}",
            f"laneway=laneway-key@{root}",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count(" ok") == 2  # both runs passed their checks
    assert "x ceiling" in out  # laneway's median as a ratio of the first variant's


def test_adversity_failures_on_a_tiny_input(kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Poison records are dead-lettered exactly once, failing-once records are not, and every
    handled offset is counted once: the checks ``bench.adversity`` fails a run on."""
    root = str(Path(__file__).resolve().parents[2])
    code = adversity_main(
        [
            f"--bootstrap={kafka_bootstrap}",
            "--records=1200",
            "--repeats=1",
            "--scenarios=failures",
            "--work-us=2",  # the handler's own work per call: the checks hold with it
            f"this={root}",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "== failures (1,200 records, 2 µs of work per call, medians of 1)" in out, out
    runs = [line for line in out.splitlines() if line.startswith("failures run 0")]
    assert len(runs) == 3 and all(line.endswith(" ok") for line in runs), out
    poisoned = next(line for line in runs if "b-poison" in line)
    assert "dead letters 0 " not in poisoned  # 0.5% of 1,200 records are poison
    assert "poison/none" in out
    assert "CPU per record" in out  # the child's CPU per record beside the rates
