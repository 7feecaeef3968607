"""``python -m bench --mode quick|full``: run the scenarios, write results, the report and plots.

The broker: ``LANEWAY_BOOTSTRAP`` (or ``--bootstrap``), else a local KRaft broker started
for the run. Raw results go to ``bench/results/<timestamp>/results.json`` (git-ignored);
``--write-report`` also refreshes the generated part of ``BENCHMARKS.md`` and ``bench/plots``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.contenders import IN_VENV, QUIX
from bench.runner import ROOT

SCENARIOS = ("noop", "io", "hotkey", "latency", "backlog", "spark")
DEFAULT_SCENARIOS = {"quick": SCENARIOS[:-1], "full": SCENARIOS}


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--mode", choices=["quick", "full"], default="quick")
    ap.add_argument(
        "--contenders",
        help="comma-separated, from: " + ", ".join([*IN_VENV, QUIX]) + " (default: all; quick mode "
        "leaves out laneway-key-async)",
    )
    ap.add_argument("--scenarios", help="comma-separated, from: " + ", ".join(SCENARIOS))
    ap.add_argument("--records", type=int, help="shrink every scenario to about this many records")
    ap.add_argument("--repeats", type=int, help="override the mode's repeat count")
    ap.add_argument("--io-concurrency", help="comma-separated concurrency levels for the I/O scenario")
    ap.add_argument("--latency-rates", help="comma-separated records/s for the latency scenario")
    ap.add_argument("--max-events", type=int, help="in-memory cap for every contender (default 10,000)")
    ap.add_argument("--bootstrap", default=os.environ.get("LANEWAY_BOOTSTRAP"))
    ap.add_argument("--out", type=Path, help="results directory (default bench/results/<timestamp>)")
    ap.add_argument(
        "--write-report", action="store_true", help="refresh BENCHMARKS.md's generated part and bench/plots"
    )
    ap.add_argument(
        "--report-from",
        type=Path,
        nargs="+",
        help="run nothing: render the report from these results.json files (later ones add scenarios)",
    )
    return ap.parse_args(argv)


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from laneway.ops.broker import LocalBroker

    with LocalBroker.create() as b:
        yield b.bootstrap


def main(argv: list[str] | None = None) -> int:
    from bench.harness import MODES, Scenarios
    from bench.kafka_io import Kafka
    from bench.report import machine, write_reports
    from bench.runner import Runner

    args = parse(argv)
    if args.report_from:
        merged = merge_results([json.loads(p.read_text()) for p in args.report_from])
        out = args.out or args.report_from[-1].parent
        write_reports(merged, out, to_repo=args.write_report)
        return 0
    mode = MODES[args.mode]
    if args.repeats:
        mode = dataclasses.replace(
            mode, repeats=args.repeats, io_repeats=args.repeats, rate_repeats=args.repeats
        )
    if args.records:
        n = args.records
        mode = dataclasses.replace(
            mode,
            noop_records=n,
            io_seconds=0.5,
            io_min_records=max(100, n // 10),
            hot_seconds=2.0,
            latency_seconds=2.0,
            backlog_depths=(n, 2 * n),
        )
    if args.latency_rates:
        mode = dataclasses.replace(mode, latency_rates=tuple(float(x) for x in args.latency_rates.split(",")))
    if args.max_events:
        mode = dataclasses.replace(mode, max_events=args.max_events)
    if args.io_concurrency:
        mode = dataclasses.replace(mode, io_concurrency=tuple(int(x) for x in args.io_concurrency.split(",")))
    default = (
        [*IN_VENV, QUIX] if args.mode == "full" else [c for c in [*IN_VENV, QUIX] if c != "laneway-key-async"]
    )
    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()] if args.contenders else default
    unknown = set(contenders) - {*IN_VENV, QUIX}
    if unknown:
        print(f"unknown contender(s): {sorted(unknown)}", file=sys.stderr)
        return 2
    scenarios = args.scenarios.split(",") if args.scenarios else list(DEFAULT_SCENARIOS[args.mode])
    out = args.out or ROOT / "bench" / "results" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    log_file = (out / "log.txt").open("a")

    def log(msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    command = "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:])
    results: dict[str, Any] = {
        "command": command,
        "mode": args.mode,
        "settings": dataclasses.asdict(mode),
        "contenders": contenders,
        "machine": machine(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "scenarios": {},
    }
    t0 = time.monotonic()
    with broker(args.bootstrap) as bootstrap:
        kafka = Kafka(bootstrap)
        sc = Scenarios(kafka, Runner(kafka, out, log), mode, contenders, log)
        try:
            for name in scenarios:
                log(f"== {name}")
                if name == "spark":
                    from bench.spark_harness import run_spark

                    results["scenarios"][name] = run_spark(bootstrap, kafka, args.mode, out, log)
                else:
                    results["scenarios"][name] = getattr(sc, {"hotkey": "hot_key"}.get(name, name))()
                results["elapsed_s"] = time.monotonic() - t0
                (out / "results.json").write_text(json.dumps(results, indent=1))
        finally:
            kafka.delete_all()
            kafka.close()
    log(f"done in {time.monotonic() - t0:.0f}s: {out / 'results.json'}")
    write_reports(results, out, to_repo=args.write_report)
    bad = [
        r
        for s in results["scenarios"].values()
        if isinstance(s, dict)
        for r in s.get("runs", [])
        if not r.get("correct")
    ]
    return 1 if bad else 0


def merge_results(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One results dict from several runs: the first's settings; scenarios and commands added."""
    merged = dict(parts[0])
    merged["scenarios"] = dict(parts[0]["scenarios"])
    for extra in parts[1:]:
        for name, sc in extra["scenarios"].items():
            old = merged["scenarios"].get(name)
            if isinstance(old, dict) and "runs" in old and "runs" in sc and name == "latency":
                merged["scenarios"][name] = {**old, "runs": old["runs"] + sc["runs"]}  # more rates
            else:
                merged["scenarios"][name] = sc
        merged["command"] += f"` and `{extra['command']}"
        merged["elapsed_s"] = merged.get("elapsed_s", 0) + extra.get("elapsed_s", 0)
        merged["contenders"] += [c for c in extra["contenders"] if c not in merged["contenders"]]
    return merged


if __name__ == "__main__":
    sys.exit(main())
