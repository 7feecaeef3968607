"""Laneway under adversity, code against code: ``python -m bench.adversity NAME=CHECKOUT ...``.

Runs each scenario on one broker (``LANEWAY_BOOTSTRAP``, else a local one) against every
checkout, alternated run by run. Each run is a fresh ``python -m bench.child`` process of this
tree's harness with the checkout's ``laneway`` package (a directory of two symlinks goes first
on ``PYTHONPATH``), so old code runs the same scenarios as new code:

    python -m bench.adversity before=/tmp/before after=. --scenarios failures,io

* ``failures``: 12 partitions, 1,000 keys per partition, a cheap plain handler with
  ``Retry(max_attempts=3, initial_backoff=0.005, max_backoff=0.05)``: (a) no failures,
  (b) 0.5% poison records (always raise; each must be dead-lettered exactly once),
  (c) 3% of records failing once. Target: b/a and c/a >= 0.8. ``--work-us N``: the handler
  computes N µs per call first (a handler with work of its own: what failures cost beside it).
* ``warmup``: the ``failures`` set-up without failures, and with the handler's first call
  computing for 20 ms (an import, a cache built; it holds the GIL): the rate after that call,
  against the clean run's. Target: >= 0.9 (one slow call costs no lasting speed).
* ``partitions``: ``ordering="partition"``, a plain handler sleeping 1 ms, concurrency 16:
  the lanes busy, from the per-partition counts sampled every 100 ms. Target: >= 0.9 x 12.
* ``restart``: kill -9 mid-backlog (a 10% hot key, 3% of records failing once, 1 ms per
  record; killed 3 s after the first record), then a stuck key (its first record blocks 20 s, killed at 10 s);
  a restart drains the rest. Records run again after the kill, against those finished in the
  last commit interval plus those in flight.
* ``hotkey-conflate``: a 20% hot key, 5 ms per call, with and without ``conflate=True``:
  the time to drain the hot key ('not supported' on code without conflation).
* ``io``: ``laneway-key-async`` sleeping 5 ms at concurrency 256, against the bare uvloop
  ceiling (``bench.ceiling.run_asyncio``) measured in the same run, with the benchmark's handler
  (its per-record checks) and with a plain app's (it sleeps and counts). Target: >= 0.95x.

Prints every run and the medians; exits 1 if a run failed its checks (count per key and per
offset, the dead letters, nothing lost across a kill).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.ceiling import run_asyncio
from bench.workload import chosen
from laneway.ops.broker import LocalBroker

__all__ = ["SCENARIOS", "busy_lanes", "main", "parse_log", "parse_variants", "redone"]

from bench.adversity_lab import (  # noqa: F401 (the scenarios' tools, and names tests use)
    COMMIT_INTERVAL,
    DEFAULT_RECORDS,
    KEYS,
    PARTITIONS,
    QUICK_GROUP,
    RETRY,
    ROOT,
    SCENARIOS,
    Lab,
    Runs,
    _fmt,
    _ratio,
    _spread,
    busy_lanes,
    dead_letters,
    parse_log,
    parse_variants,
    problems,
    produce,
    redone,
    turns,
)


def failures(lab: Lab, names: list[str], n: int, repeats: int, runs: Runs) -> list[str]:
    topic = lab.topic("failures")
    seqs = produce(lab.bootstrap, topic, n)
    poison = {(k, s) for k, last in enumerate(seqs) for s in range(1, last + 1) if chosen(k, s, 0.005, 1)}
    ends = lab.kafka.end_offsets(topic, PARTITIONS)
    # the same handler in every case: the clean one makes the failing ones' per-record checks
    cases = {"a-none": {"adverse": True}, "b-poison": {"poison": 0.005}, "c-once": {"fail_once": 0.03}}
    order = list(cases.items())
    for rep in range(repeats):
        # the cases take turns going first: a run right after another child's may find the
        # machine (its caches, the broker) in another state than the first of a set
        for case, options in order[rep % len(order) :] + order[: rep % len(order)]:
            for name in turns(names, rep):
                dlq = lab.dlq(topic)
                options = {"work_us": lab.work_us, **options}
                spec = lab.spec(topic, n, retry=RETRY, end_offsets=ends, dead_letter_topic=dlq, **options)
                r = lab.run(name, spec)
                bad = len(poison) if options.get("poison") else 0
                problem = problems(r, n, n - bad)
                letters = dead_letters(lab.bootstrap, dlq)
                want = Counter(dict.fromkeys(poison, 1)) if bad else Counter()
                if not problem and letters != want:
                    missing, extra = len(want - letters), sum((letters - want).values())
                    problem = f"dead letters: {missing} poison records missing, {extra} extra or twice"
                rate = r["count"] / r["window_s"] if r.get("window_s") else 0.0
                figures = {"rec/s": rate, "dead letters": letters.total()}
                if r.get("count"):  # the child's CPU per record over the window
                    figures["cpu us/rec"] = r.get("cpu_window_s", 0.0) / r["count"] * 1e6
                if "broker_cpu_s" in r:
                    figures["broker cpu s"] = r["broker_cpu_s"]
                if "switches" in r:  # the whole child's: GIL hand-overs between its threads
                    figures["switches"] = r["switches"]
                for kind, seconds in r.get("thread_cpu", {}).items():  # LANEWAY_BENCH_THREAD_CPU=1
                    figures[kind if kind.endswith(" switches") else f"{kind} cpu s"] = seconds
                runs.add(rep, case, name, figures, problem)
    lines = []
    for name in names:
        a, b, c = (runs.median(case, name, "rec/s") for case in cases)
        line = (
            f"{name}: none {_fmt(a)} rec/s, poison {_fmt(b)} rec/s, fail-once {_fmt(c)} rec/s; "
            f"poison/none {_ratio(b, a, 0.8)}, fail-once/none {_ratio(c, a, 0.8)}"
        )
        base, poison, once = cases
        line += (
            f"; per repeat poison/none {_spread(runs.ratios(poison, base, name, 'rec/s'))}, "
            f"fail-once/none {_spread(runs.ratios(once, base, name, 'rec/s'))}"
        )
        per = [runs.median(case, name, "cpu us/rec") for case in cases]
        if all(v is not None for v in per):
            line += "; CPU per record " + "/".join(f"{v:.2f}" for v in per if v is not None) + " us"
        cpu = [runs.median(case, name, "broker cpu s") for case in cases]
        if all(v is not None for v in cpu):
            line += "; the broker's CPU per run " + "/".join(f"{v:.2f}" for v in cpu if v is not None) + " s"
        lines.append(line)
    return lines


def warmup(lab: Lab, names: list[str], n: int, repeats: int, runs: Runs) -> list[str]:
    topic = lab.topic("warmup")
    produce(lab.bootstrap, topic, n)
    ends = lab.kafka.end_offsets(topic, PARTITIONS)
    cases = {"a-none": {"adverse": True}, "b-slow-1st": {"slow_first_s": 0.02}}
    for rep in range(repeats):
        for case, options in cases.items():
            for name in turns(names, rep):
                r = lab.run(name, lab.spec(topic, n, end_offsets=ends, **options))
                rate = r["count"] / r["window_s"] if r.get("window_s") else 0.0
                runs.add(rep, case, name, {"rec/s": rate}, problems(r, n, n))
    lines = []
    for name in names:
        a, b = (runs.median(case, name, "rec/s") for case in cases)
        lines.append(f"{name}: none {_fmt(a)} rec/s, slow first call {_fmt(b)} rec/s; {_ratio(b, a, 0.9)}")
    return lines


def partitions(lab: Lab, names: list[str], n: int, repeats: int, runs: Runs) -> list[str]:
    topic = lab.topic("partitions")
    produce(lab.bootstrap, topic, n, round_robin=PARTITIONS)
    ends = lab.kafka.end_offsets(topic, PARTITIONS)
    target = 0.9 * min(PARTITIONS, 16)
    for rep in range(repeats):
        for name in turns(names, rep):
            spec = lab.spec(
                topic,
                n,
                ordering="partition",
                sleep_s=0.001,
                concurrency=16,
                lane_sample_s=0.1,
                end_offsets=ends,
            )
            r = lab.run(name, spec)
            rate = r["count"] / r["window_s"] if r.get("window_s") else 0.0
            lanes = busy_lanes(r.get("lane_samples", []))
            runs.add(rep, "sleep-1ms", name, {"rec/s": rate, "lanes busy": lanes}, problems(r, n, n))
    lines = []
    for name in names:
        rate, lanes = runs.median("sleep-1ms", name, "rec/s"), runs.median("sleep-1ms", name, "lanes busy")
        verdict = "-" if lanes is None else "met" if lanes >= target else "not met"
        lines.append(f"{name}: {_fmt(rate)} rec/s, {_fmt(lanes)} lanes busy ({verdict}, target {target:.1f})")
    return lines


def _kill_and_restart(
    lab: Lab, name: str, topic: str, ends: list[int], kill_after: float, kill_at: int, **options: Any
) -> tuple[dict[str, float], str]:
    """Run, kill -9 ``kill_after`` s after the first record finished (or once ``kill_at`` did),
    restart on the same group until its commits reach the end; compare the two logs."""
    spec = lab.spec(topic, sum(ends) + 1, kafka_config=QUICK_GROUP, log_path="", **options)
    spec["log_path"] = log1 = str(lab.tmp / f"log-{lab.n}-1")
    proc, _ = lab.start(name, spec)
    t_first, deadline = 0.0, time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
        finished = Path(log1).read_bytes().count(b"f ") if Path(log1).exists() else 0
        t_first = t_first or (time.monotonic() if finished else 0.0)
        if t_first and (time.monotonic() - t_first >= kill_after or finished >= kill_at):
            break
    t_kill = time.time()
    proc.kill()
    proc.wait()
    if not t_first:
        return {}, "no record finished before the kill"
    spec.update(log_path=str(lab.tmp / f"log-{lab.n}-2"), stuck_s=0.0)
    proc, _ = lab.start(name, spec)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
        if lab.kafka.committed(spec["group"], topic, PARTITIONS) == ends:
            break
    proc.kill()
    proc.wait()
    figures = redone(
        Path(log1).read_text(), Path(spec["log_path"]).read_text(), t_kill, COMMIT_INTERVAL, ends
    )
    problem = []
    if figures["lost"]:
        problem.append(f"{figures['lost']} records never finished")
    if figures["twice_after"]:
        problem.append(f"{figures['twice_after']} finished twice after the restart")
    if lab.kafka.committed(spec["group"], topic, PARTITIONS) != ends:
        problem.append("the restart's commits did not reach the end")
    return {k: float(v) for k, v in figures.items() if k not in ("lost", "twice_after")}, "; ".join(problem)


def restart(lab: Lab, names: list[str], n: int, repeats: int, runs: Runs) -> list[str]:
    hot_topic, stuck_topic = lab.topic("restart-hot"), lab.topic("restart-stuck")
    produce(lab.bootstrap, hot_topic, n, hot=0.1)
    stuck_seqs = produce(lab.bootstrap, stuck_topic, n // 2)
    stuck_key = max(range(KEYS), key=stuck_seqs.__getitem__)  # a key with records
    hot_ends = lab.kafka.end_offsets(hot_topic, PARTITIONS)
    stuck_ends = lab.kafka.end_offsets(stuck_topic, PARTITIONS)
    for rep in range(repeats):
        for name in turns(names, rep):
            figures, problem = _kill_and_restart(
                lab, name, hot_topic, hot_ends, 3.0, n // 2, retry=RETRY, fail_once=0.03, sleep_s=0.001
            )
            runs.add(rep, "hot-key", name, figures, problem)
        for name in names:
            figures, problem = _kill_and_restart(
                lab, name, stuck_topic, stuck_ends, 10.0, n, stuck_key=stuck_key, stuck_s=20.0
            )
            runs.add(rep, "stuck-key", name, figures, problem)
    lines = []
    for case in ("hot-key", "stuck-key"):
        for name in names:
            got, allowed = runs.median(case, name, "redone"), runs.median(case, name, "allowed")
            verdict = "-" if got is None or allowed is None else "met" if got <= allowed else "not met"
            lines.append(
                f"{case} {name}: {_fmt(got)} records redone per kill against {_fmt(allowed)} finished "
                f"in the last commit interval or in flight ({verdict})"
            )
    return lines


def hotkey_conflate(lab: Lab, names: list[str], n: int, repeats: int, runs: Runs) -> list[str]:
    topic = lab.topic("conflate")
    seqs = produce(lab.bootstrap, topic, n, hot=0.2)
    ends = lab.kafka.end_offsets(topic, PARTITIONS)
    for rep in range(repeats):
        for case in ("plain", "conflate"):
            for name in turns(names, rep):
                spec = lab.spec(
                    topic,
                    n + 1,
                    sleep_s=0.005,
                    final_seqs=seqs,
                    conflate=case == "conflate",
                    end_offsets=ends,
                )
                r = lab.run(name, spec)
                if case == "conflate" and "argument 'conflate'" in str(r.get("error")):
                    runs.add(rep, case, name, {}, None)
                    continue
                problem = problems(r, n if case == "plain" else None, n if case == "plain" else None)
                if not problem and "drain_s" not in r:
                    problem = "not every key's last record ran"
                figures = {"hot drain s": r.get("hot_drain_s", 0.0), "all drain s": r.get("drain_s", 0.0)}
                runs.add(rep, case, name, {**figures, "handled": r.get("count", 0)}, problem)
    lines = []
    for name in names:
        plain, conflate = (
            runs.median("plain", name, "hot drain s"),
            runs.median("conflate", name, "hot drain s"),
        )
        supported = any(
            r["problem"] is not None for r in runs.rows if r["case"] == "conflate" and r["name"] == name
        )
        shown = _fmt(conflate, " s") if supported else "not supported"
        lines.append(f"{name}: the hot key drains in {_fmt(plain, ' s')} plain, {shown} with conflate=True")
    return lines


def io(lab: Lab, names: list[str], n: int, repeats: int, runs: Runs) -> list[str]:
    topic = lab.topic("io")
    produce(lab.bootstrap, topic, n)
    ends = lab.kafka.end_offsets(topic, PARTITIONS)
    # "bench": the benchmark's handler, with its per-record checks; "plain": a plain app's, which
    # sleeps and counts (the two set-ups)
    cases = {"bench": {"end_offsets": ends}, "plain": {"plain": True, "track_offsets": False}}
    for rep in range(repeats):
        ceiling = run_asyncio(n, 256, 0.005, 0.0, "uvloop")["rate"]
        runs.add(rep, "io", "ceiling", {"rec/s": ceiling}, "")
        for case, options in cases.items():
            for name in turns(names, rep):
                spec = lab.spec(
                    topic, n, contender="laneway-key-async", sleep_s=0.005, concurrency=256, **options
                )
                r = lab.run(name, spec)
                rate = r["count"] / r["window_s"] if r.get("window_s") else 0.0
                runs.add(rep, case, name, {"rec/s": rate}, problems(r, n, n if case == "bench" else None))
    base = runs.median("io", "ceiling", "rec/s")
    lines = [f"bare uvloop ceiling: {_fmt(base)} rec/s"]
    for name in names:
        bench, plain = (runs.median(case, name, "rec/s") for case in cases)
        lines.append(
            f"{name}: the benchmark's handler {_fmt(bench)} rec/s, {_ratio(bench, base, 0.95)}; "
            f"a plain app's {_fmt(plain)} rec/s, {_ratio(plain, base, 0.95)} of the ceiling"
        )
    return lines


RUNNERS = {
    "failures": failures,
    "warmup": warmup,
    "partitions": partitions,
    "restart": restart,
    "hotkey-conflate": hotkey_conflate,
    "io": io,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.adversity", description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+", help="NAME=CHECKOUT (e.g. before=/tmp/before after=.)")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma list of {', '.join(SCENARIOS)}")
    ap.add_argument("--records", type=int, help="records per scenario (default: each scenario's own)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--work-us", type=float, default=0.0, help="failures: the handler's own work per call, µs (default 0)"
    )
    ap.add_argument("--json", help="write every run and the summaries here")
    ap.add_argument("--bootstrap", default=os.environ.get("LANEWAY_BOOTSTRAP"))
    ap.add_argument(
        "--profile",
        metavar="DIR",
        help="run each child under py-spy (200 Hz, the thread holding the GIL) and write its samples "
        "to DIR as <n>-<name>.txt, n counting the runs in the order printed (py-spy's raw format, one "
        "stack per line; its overhead slows the runs)",
    )
    args = ap.parse_args(argv)
    try:
        variants = parse_variants(args.variants)
    except ValueError as exc:
        ap.error(str(exc))
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if unknown := [s for s in scenarios if s not in RUNNERS]:
        ap.error(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
    broker = None if args.bootstrap else LocalBroker.create()
    if broker is not None:
        broker.start()
    bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
    names = [name for name, _ in variants]
    report: dict[str, Any] = {"variants": dict(variants), "scenarios": {}}
    failed = 0
    try:
        with tempfile.TemporaryDirectory(prefix="bench-adversity-") as tmp:
            pid = broker.proc.pid if broker is not None and broker.proc is not None else None
            lab = Lab(
                bootstrap, variants, Path(tmp), broker_pid=pid, profile=args.profile, work_us=args.work_us
            )
            try:
                for scenario in scenarios:
                    runs = Runs(scenario)
                    n = args.records or DEFAULT_RECORDS[scenario]
                    summary = RUNNERS[scenario](lab, names, n, args.repeats, runs)
                    work = ""
                    if scenario == "failures" and args.work_us:
                        work = f", {args.work_us:g} µs of work per call"
                    print(f"== {scenario} ({n:,} records{work}, medians of {args.repeats})", flush=True)
                    for line in summary:
                        print(f"   {line}", flush=True)
                    failed += runs.failed
                    report["scenarios"][scenario] = {"records": n, "runs": runs.rows, "summary": summary}
            finally:
                lab.kafka.delete_all()
                lab.kafka.close()
    finally:
        if broker is not None:
            broker.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(f"{failed} run(s) failed their checks" if failed else "every run passed its checks")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
