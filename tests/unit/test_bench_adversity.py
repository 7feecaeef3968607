"""The pure parts of ``bench.adversity``: the variants, the lanes busy, the records redone, and
the adversity options of the Laneway contender's handler (no broker: events built by hand)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.adversity import busy_lanes, parse_log, parse_variants, redone
from bench.contenders.laneway_app import Poison, _adverse
from bench.workload import HEADER, Recorder, RunSpec, chosen, encode
from laneway.engine.events import Event

ROOT = Path(__file__).resolve().parents[2]


def test_variants_name_existing_checkouts(tmp_path: Path) -> None:
    assert parse_variants([f"a={ROOT}", "b=."]) == [("a", str(ROOT)), ("b", str(Path.cwd().resolve()))]
    for bad in ("nameless", f"={ROOT}", "a=", f"x={tmp_path}"):
        with pytest.raises(ValueError):
            parse_variants([bad])
    with pytest.raises(ValueError, match="twice"):
        parse_variants([f"a={ROOT}", f"a={ROOT}"])


def test_busy_lanes_count_the_partitions_that_advanced_per_interval() -> None:
    samples = [
        [0, 0, 0],  # idle start-up: left out
        [0, 0, 0],
        [5, 3, 0],  # 2 advanced
        [9, 6, 1],  # 3
        [9, 7, 1],  # 1
        [9, 7, 1],  # 0, inside the window: counted
        [9, 8, 2],  # 2
        [9, 8, 2],  # idle tail: left out
    ]
    assert busy_lanes(samples) == pytest.approx((2 + 3 + 1 + 0 + 2) / 5)
    assert busy_lanes([[0, 0], [0, 0]]) == 0.0
    assert busy_lanes([]) == 0.0


def test_redone_counts_the_records_run_again_after_the_kill() -> None:
    first = "\n".join(
        [
            "s 0 0",
            "f 0 0 100.0",  # finished long before the kill, committed: not run again
            "s 0 1",
            "f 0 1 109.5",  # in the last commit interval: run again
            "s 0 2",  # attempt 1 failed
            "s 0 2",  # in flight at the kill
            "s 1 0",
            "f 1 0 108.0",  # finished early but run again (held back behind the record in flight)
            "f 1 1",  # torn line: skipped
        ]
    )
    second = "\n".join(
        ["s 0 1", "f 0 1 111.0", "s 0 2", "f 0 2 111.1", "s 1 0", "f 1 0 111.2", "f 1 0 111.3"]
    )
    got = redone(first, second, t_kill=110.0, commit_interval=1.0, ends=[4, 1])
    assert got == {
        "redone": 3,  # (0,1), (0,2), (1,0)
        "allowed": 2,  # (0,1) in the window, (0,2) in flight
        "in_flight": 1,
        "window": 1,
        "finished_before": 3,
        "lost": 1,  # (0,3): finished by neither run
        "twice_after": 1,  # (1,0) finished twice after the restart
    }
    started, finished, twice = parse_log(second)
    assert started == {(0, 1), (0, 2), (1, 0)} and finished[(1, 0)] == 111.3 and twice == 1


def test_chosen_picks_a_stable_fraction() -> None:
    picked = [(k, s) for k in range(1000) for s in range(200) if chosen(k, s, 0.005, 1)]
    assert 800 <= len(picked) <= 1200  # 0.5% of 200,000
    assert picked == [(k, s) for k in range(1000) for s in range(200) if chosen(k, s, 0.005, 1)]
    other = [(k, s) for k in range(1000) for s in range(200) if chosen(k, s, 0.005, 2)]
    assert len(set(picked) & set(other)) < len(picked) // 10  # another salt picks other records
    assert not any(chosen(k, 1, 0.0, 1) for k in range(1000))
    assert all(chosen(k, 1, 1.0, 1) for k in range(1000))


def _records(keys: int, per_key: int) -> list[Event]:
    return [
        Event("t", kid % 2, kid * per_key + seq - 1, b"k", encode(kid, seq, False, 0))
        for seq in range(1, per_key + 1)
        for kid in range(keys)
    ]


def _run(handler: object, events: list[Event], attempts: int) -> tuple[int, int]:
    """Call the handler as the engine would: retry a failure up to ``attempts``; count the
    records that succeeded and those that ran out of attempts."""
    ok = dead = 0
    for ev in events:
        for attempt in range(1, attempts + 1):
            ev.attempt = attempt
            try:
                handler(ev)  # type: ignore[operator]
            except Poison:
                continue
            ok += 1
            break
        else:
            dead += 1
    return ok, dead


def test_the_handler_poisons_fails_once_and_counts_dead_letters_towards_the_limit() -> None:
    events = _records(keys=40, per_key=25)  # 1,000 records
    poison = sum(chosen(*_key_seq(ev), 0.05, 1) for ev in events)
    once = sum(chosen(*_key_seq(ev), 0.1, 2) and not chosen(*_key_seq(ev), 0.05, 1) for ev in events)
    assert poison and once
    spec = RunSpec(
        "laneway-key", "", "t", "g", 2, 40, limit=1000, retry=[3, 0.0, 0.0], poison=0.05, fail_once=0.1
    )
    rec = Recorder(spec)
    ok, dead = _run(_adverse(spec, rec), events, attempts=3)
    assert (ok, dead) == (1000 - poison, poison)
    assert rec.extra["poisoned"] == poison and rec.extra["failed_once"] == once
    assert rec.done.is_set()  # handled plus dead-lettered reached the limit
    assert rec.result()["count"] == 1000 and rec.result()["order_violations"] == 0


def test_the_handler_logs_each_start_and_finish_and_stops_at_every_keys_last(tmp_path: Path) -> None:
    events = _records(keys=4, per_key=3)
    log = tmp_path / "log"
    finals = [3, 3, 3, 3]
    spec = RunSpec("laneway-key", "", "t", "g", 2, 4, limit=10**6, log_path=str(log), final_seqs=finals)
    rec = Recorder(spec)
    handler = _adverse(spec, rec)
    _run(handler, events[:-1], attempts=1)
    assert not rec.done.is_set()  # key 3's last record has not run
    _run(handler, events[-1:], attempts=1)
    assert rec.done.is_set() and rec.extra["drain_s"] >= rec.extra["hot_drain_s"] >= 0
    started, finished, twice = parse_log(log.read_text())
    assert started == set(finished) == {(ev.partition, ev.offset) for ev in events} and twice == 0


def _key_seq(ev: Event) -> tuple[int, int]:
    assert ev.value is not None
    kid, seq = HEADER.unpack_from(ev.value)[:2]
    return kid, seq


def test_the_handlers_first_call_computes_and_the_rest_do_not() -> None:
    events = _records(keys=4, per_key=5)
    spec = RunSpec("laneway-key", "", "t", "g", 2, 4, limit=10**6, slow_first_s=0.05)
    handler = _adverse(spec, Recorder(spec))
    t0, c0 = time.perf_counter(), time.thread_time()
    _run(handler, events[:1], attempts=1)
    assert time.thread_time() - c0 >= 0.005  # on the CPU (it holds the GIL), not asleep
    t1 = time.perf_counter()
    assert t1 - t0 >= 0.05
    _run(handler, events[1:], attempts=1)
    assert time.perf_counter() - t1 < 0.5  # not 19 x 50 ms


def test_a_process_cpu_is_read_from_proc_and_a_figure_missing_from_some_runs_is_left_out() -> None:
    """The broker's CPU per run (``broker cpu s``) exists only with a local broker: the medians
    take the runs that have a figure, and a figure no run has is None, not a KeyError."""
    import os

    from bench.adversity_lab import Runs, process_cpu

    assert process_cpu(None) is None
    before = process_cpu(os.getpid())
    assert before is not None
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    after = process_cpu(os.getpid())
    assert after is not None and after > before
    runs = Runs("failures")
    runs.add(0, "a-none", "x", {"rec/s": 10.0, "broker cpu s": 0.5}, "")
    runs.add(1, "a-none", "x", {"rec/s": 30.0}, "")
    assert runs.median("a-none", "x", "rec/s") == 20.0
    assert runs.median("a-none", "x", "broker cpu s") == 0.5
    assert runs.median("a-none", "x", "cpu us/rec") is None


def test_a_set_reports_each_repeats_ratio_of_runs_close_in_time() -> None:
    """The medians of a set mix runs minutes apart on a machine whose speed moves: the ratio of
    each repeat's own runs shows how far the verdict moves. A repeat missing its base run, or
    whose run failed, gives no ratio."""
    from bench.adversity_lab import Runs, _spread

    runs = Runs("failures")
    runs.add(0, "a-none", "x", {"rec/s": 100.0}, "")
    runs.add(0, "b-poison", "x", {"rec/s": 80.0}, "")
    runs.add(1, "b-poison", "x", {"rec/s": 50.0}, "")
    runs.add(1, "a-none", "x", {"rec/s": 200.0}, "")
    runs.add(2, "a-none", "x", {"rec/s": 100.0}, "FAIL: lost records")
    runs.add(2, "b-poison", "x", {"rec/s": 90.0}, "")
    runs.add(3, "b-poison", "x", {"rec/s": 70.0}, "")
    runs.add(0, "b-poison", "y", {"rec/s": 10.0}, "")
    assert runs.ratios("b-poison", "a-none", "x", "rec/s") == [0.8, 0.25]
    assert runs.ratios("b-poison", "a-none", "y", "rec/s") == []
    assert _spread([0.8, 0.25]) == "0.25x-0.80x"
    assert _spread([]) == "-"


def test_the_variants_take_turns_at_running_first() -> None:
    from bench.adversity_lab import turns

    orders = [turns(["before", "after"], rep) for rep in range(4)]
    assert orders == [["before", "after"], ["after", "before"]] * 2
