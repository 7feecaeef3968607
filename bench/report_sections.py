"""The report's text: a markdown section per scenario (noop, io, latency, hotkey, backlog,
spark), the engine targets, the machine, and ``render``, which puts them together."""

from __future__ import annotations

from typing import Any

from bench.report_common import Run, contender_order, fmt, group, med, per_million, table, verdict


def noop_section(results: dict[str, Any]) -> tuple[str, dict[str, float]]:
    sc = results["scenarios"].get("noop")
    if not sc:
        return "", {}
    by = group(sc["runs"], lambda r: r["contender"])
    rates = {c: med(r["rate"] for r in rs if r.get("correct")) for c, rs in by.items()}
    raw = rates.get("raw", 0.0)
    lk = rates.get("laneway-key", 0.0)
    rows = []
    for c in contender_order(results):
        rs = by.get(c)
        if not rs:
            continue
        rate = rates[c]
        rows.append(
            [
                c,
                fmt(rate),
                f"{rate / raw:.2f}" if raw else "-",
                f"{lk / rate:.2f}" if rate and lk else "-",
                fmt(med(per_million(r) for r in rs), 1),
                fmt(med(r.get("rusage_cpu_s", 0) for r in rs), 2),
                fmt(med(r.get("process_wall_s", 0) for r in rs), 1),
                fmt(med(r.get("rss_peak_mb", 0) for r in rs)),
                verdict(rs),
            ]
        )
    text = (
        f"### No-op handler: per-record overhead\n\n{sc['records']:,} records, 8 partitions, 10,000 keys; "
        f"median of {results['settings']['repeats']} runs each. *records/s* is measured from the first "
        "to the last handled record (start-up and shutdown excluded); *CPU s / 1M* is the process CPU "
        "time (all threads) over that same window per million records; *process CPU* and *wall* cover "
        "the whole process (start-up, group join, shutdown and final commit included). Laneway and "
        "arroyo run at concurrency 256.\n\n"
        + table(
            [
                "contender",
                "records/s",
                "÷ raw (ceiling)",
                "Laneway key ÷ it",
                "CPU s / 1M",
                "process CPU s",
                "wall s",
                "peak RSS MB",
                "correct",
            ],
            rows,
        )
    )
    return text, rates


def io_section(results: dict[str, Any]) -> tuple[str, dict[tuple[str, int], float]]:
    sc = results["scenarios"].get("io")
    if not sc:
        return "", {}
    by = group(sc["runs"], lambda r: (r["contender"], r["concurrency"]))
    rows = []
    medians: dict[tuple[str, int], float] = {}
    for c in contender_order(results):
        for (cc, conc), rs in sorted(by.items(), key=lambda kv: kv[0][1]):
            if cc != c:
                continue
            rate = med(r["rate"] for r in rs if r.get("correct"))
            medians[(c, conc)] = rate
            ideal = rs[0]["ideal_rate"]
            rows.append(
                [
                    c,
                    str(conc),
                    fmt(med(r["limit"] for r in rs)),
                    fmt(ideal),
                    fmt(rate),
                    f"{rate / ideal:.0%}" if ideal else "-",
                    fmt(med(per_million(r) for r in rs), 1),
                    verdict(rs),
                ]
            )
    reps = results["settings"].get("io_repeats", 1)
    text = (
        f"### I/O-bound handler: sleeping {sc['sleep_s'] * 1000:.0f} ms, 10,000 keys over 8 partitions\n\n"
        "The ideal rate is concurrency / 5 ms, capped by the contender's own no-op rate. A slow contender "
        "handles fewer records (about the ideal rate x the run length) of the same topic; its count, "
        "duplicate and order checks cover what it handled. raw and quix run one record at a time "
        f"(concurrency 1), partition-seq one per partition (8). Medians of {reps} run(s).\n\n"
        + table(
            [
                "contender",
                "concurrency",
                "records",
                "ideal/s",
                "records/s",
                "% of ideal",
                "CPU s / 1M",
                "correct",
            ],
            rows,
        )
        + "\n\n![throughput against concurrency](bench/plots/throughput_vs_concurrency.png)"
    )
    return text, medians


def _lat_row(rs: list[Run], part: str) -> list[str]:
    vals = [r.get(part, {}) for r in rs if r.get(part, {}).get("n")]
    if not vals:
        return ["-"] * 4
    return [fmt(med(v[q] for v in vals), 1) for q in ("p50", "p99", "p999", "max")]


def latency_section(results: dict[str, Any]) -> tuple[str, dict[str, float]]:
    sc = results["scenarios"].get("latency")
    if not sc:
        return "", {}
    by = group(sc["runs"], lambda r: (r.get("rate_target", sc["rate"]), r["contender"]))
    p99: dict[str, float] = {}
    rows = []
    for rate in sorted({k[0] for k in by}):
        for c in contender_order(results):
            rs = by.get((rate, c))
            if not rs:
                continue
            row = _lat_row(rs, "latency_other")
            v = med(r["latency_other"]["p99"] for r in rs if r.get("latency_other", {}).get("n"))
            p99[f"{c}@{rate:.0f}"] = v
            kept = sum(1 for r in rs if r.get("kept_up"))
            produced = med(r.get("rate_produced", 0.0) for r in rs)
            rows.append(
                [fmt(rate), c, fmt(produced) if produced else "-", *row, f"{kept}/{len(rs)}", verdict(rs)]
            )
    text = (
        f"### End-to-end latency at fixed rates, {sc['seconds']:.0f} s each\n\n"
        "From the producer's `produce()` call (time in the value; producer `linger.ms=1`, in the harness "
        "process on the same 2 cores) to the handler's completion, no-op handler, 10,000 keys. The "
        "highest rate is half of Laneway key mode's median no-op rate from the no-op table; *produced/s* "
        "is what the Python producer achieved (blank: not recorded). Milliseconds; medians over repeats "
        "of each run's percentile. *kept up*: handled every record before the run's deadline.\n\n"
        + table(
            [
                "target/s",
                "contender",
                "produced/s",
                "p50 ms",
                "p99 ms",
                "p999 ms",
                "max ms",
                "kept up",
                "correct",
            ],
            rows,
        )
        + "\n\n![latency distribution](bench/plots/latency_cdf.png)"
    )
    return text, p99


def hotkey_section(results: dict[str, Any]) -> str:
    sc = results["scenarios"].get("hotkey")
    if not sc:
        return ""
    by = group(sc["runs"], lambda r: r["contender"])
    rows = []
    for c in contender_order(results):
        rs = by.get(c)
        if not rs:
            continue
        other = _lat_row(rs, "latency_other")
        hot = _lat_row(rs, "latency_hot")
        handled = med(r.get("count", 0) / max(1, r["limit"]) for r in rs)
        rows.append([c, *other[:3], *hot[:2], f"{handled:.0%}", verdict(rs)])
    return (
        f"### Hot-key skew: 20% of records on one key, 5 ms handler, {sc['rate']:,.0f} records/s for "
        f"{sc['seconds']:.0f} s\n\n"
        "The hot key alone needs 20% x rate x 5 ms of sequential handler time per second (60% of one lane "
        "at 600/s); the other keys should still see about 5 ms. Latency in ms from produce to handled; "
        "*handled*: share of the produced records handled before the deadline (rate x 1.5 + 30 s).\n\n"
        + table(
            [
                "contender",
                "other keys p50",
                "other p99",
                "other p999",
                "hot key p50",
                "hot p99",
                "handled",
                "correct",
            ],
            rows,
        )
        + "\n\n![hot-key latency](bench/plots/hotkey_latency.png)"
    )


def backlog_section(results: dict[str, Any]) -> tuple[str, dict[str, tuple[float, float]]]:
    sc = results["scenarios"].get("backlog")
    if not sc:
        return "", {}
    by = group(sc["runs"], lambda r: r["contender"])
    rows = []
    growth: dict[str, tuple[float, float]] = {}
    depths = sc["depths"]
    for c in contender_order(results):
        rs = by.get(c)
        if not rs:
            continue
        rss = {r["depth"]: r.get("rss_peak_mb", 0.0) for r in rs}
        for r in sorted(rs, key=lambda r: r["depth"]):
            rows.append(
                [
                    c,
                    fmt(r["depth"]),
                    fmt(r.get("rate", 0)),
                    fmt(r.get("rss_peak_mb", 0)),
                    fmt(r.get("rusage_cpu_s", 0), 1),
                    fmt(r.get("process_wall_s", 0), 0),
                    verdict([r]),
                ]
            )
        if len(depths) > 1 and depths[0] in rss and depths[-1] in rss:
            growth[c] = (rss[depths[0]], rss[depths[-1]])
    text = (
        f"### Backlog: peak memory against backlog depth ({', '.join(f'{d:,}' for d in depths)} records)\n\n"
        f"No-op handler, consuming a pre-produced backlog from the beginning; Laneway's cap is "
        f"`Backpressure(max_events={sc['max_events']:,})`. Peak RSS sampled every 0.1 s by the harness "
        "(psutil). One run per depth (each run is long).\n\n"
        + table(
            ["contender", "backlog", "records/s", "peak RSS MB", "process CPU s", "wall s", "correct"], rows
        )
        + "\n\n![RSS over time](bench/plots/backlog_rss.png)"
    )
    return text, growth


def spark_section(results: dict[str, Any]) -> str:
    sc = results["scenarios"].get("spark")
    if not sc:
        return ""
    if sc.get("skipped"):
        return f"### Spark pipeline\n\nNot run: {sc['skipped']}"

    def rows_for(runs: list[Run], cols: list[str]) -> list[list[str]]:
        rows = []
        by = group(runs, lambda r: r["pipeline"])
        # against the append at Spark's Kafka source defaults, and with the pipeline's options
        bases = [med(r["rate"] for r in by[a]) if by.get(a) else 0.0 for a in ("append", "append-tuned")]
        for name, rs in by.items():
            rate = med(r["rate"] for r in rs)
            row = [name, fmt(med(r["records"] for r in rs)), fmt(rate, 1)]
            row += [f"{rate / b:.2f}" if b else "-" for b in bases]
            row += [fmt(med(r.get(c) or 0.0 for r in rs), 1) for c in cols]
            row += [fmt(med(r.get("cpu_s", 0) for r in rs), 0), fmt(med(r.get("wall_s", 0) for r in rs), 0)]
            row.append(verdict(rs))
            rows.append(row)
        return rows

    text = "### Spark: records landed into Delta, and freshness\n\n" + sc.get("description", "") + "\n\n"
    text += "Backlog, available-now:\n\n" + table(
        [
            "pipeline",
            "records",
            "records/s",
            "÷ append",
            "÷ append-tuned",
            "landing p50 s",
            "landing p99 s",
            "freshness p50 s",
            "freshness p99 s",
            "CPU s (JVM + Python)",
            "wall s",
            "correct",
        ],
        rows_for(sc["runs"], ["landing_p50_s", "landing_p99_s", "freshness_p50_s", "freshness_p99_s"]),
    )
    if sc.get("live"):
        text += "\n\nLive, processing-time trigger:\n\n" + table(
            [
                "pipeline",
                "records",
                "records/s landed",
                "÷ append",
                "÷ append-tuned",
                "freshness p50 s",
                "freshness p99 s",
                "CPU s (JVM + Python)",
                "wall s",
                "correct",
            ],
            rows_for(sc["live"], ["freshness_p50_s", "freshness_p99_s"]),
        )
    return str(text)


def targets(results: dict[str, Any]) -> str:
    _, noop = noop_section(results)
    _, io = io_section(results)
    _, p99 = latency_section(results)
    _, growth = backlog_section(results)
    rows = []
    raw, lk = noop.get("raw", 0.0), noop.get("laneway-key", 0.0)
    if raw and lk:
        r = lk / raw
        rows.append(
            [
                "no-op: ≥ 50% of the raw loop's records/s",
                f"{lk:,.0f} / {raw:,.0f} = {r:.0%}",
                ("met" if r >= 0.5 else "**not met**") + f" ({r / 0.5:.2f}x the bar)",
            ]
        )
    # the I/O target, for each kind of handler: a plain function (worker threads) and an
    # ``async def`` one (the event loop), which is what the README advises for I/O
    for c, kind in (("laneway-key", "plain function"), ("laneway-key-async", "`async def`")):
        if (c, 256) not in io:
            continue
        sleep = results["scenarios"]["io"]["sleep_s"]
        ideal = min(256 / sleep, noop.get(c) or float("inf"))
        got = io[(c, 256)]
        r = got / ideal
        rows.append(
            [
                f"5 ms I/O, 10,000 keys, concurrency 256, {kind} handler: ≥ 90% of min(256/5 ms, no-op rate)",
                f"{got:,.0f} / {ideal:,.0f} = {r:.0%}",
                ("met" if r >= 0.9 else "**not met**") + f" ({r / 0.9:.2f}x the bar)",
            ]
        )
    if "laneway-key" in growth:
        small, big = growth["laneway-key"]
        d = results["scenarios"]["backlog"]["depths"]
        rows.append(
            [
                f"peak RSS flat from {d[0]:,} to {d[-1]:,} records of backlog",
                f"{small:,.0f} MB → {big:,.0f} MB ({(big - small) / small:+.0%})",
                "met" if big <= small * 1.10 else "**not met**",
            ]
        )
    for key, v in sorted(p99.items(), key=lambda kv: -float(kv[0].split("@")[1])):
        c, rate = key.split("@")
        if c != "laneway-key":
            continue
        half = lk and abs(float(rate) - round(lk / 2, -2)) < 1
        rows.append(
            [
                "p99 produce → handled < 20 ms" + (" at half the max rate" if half else ""),
                f"p99 {v:,.1f} ms at {float(rate):,.0f}/s" + (" (half the no-op rate)" if half else ""),
                ("met" if v < 20 else "**not met**") + f" ({v / 20:.2f}x the bound)",
            ]
        )
    if not rows:
        return ""
    return "### Engine targets (issue 3), Laneway key mode\n\n" + table(
        ["target", "measured", "verdict"], rows
    )


def machine_section(results: dict[str, Any]) -> str:
    m = results["machine"]
    v = m["versions"]
    return (
        f"Run: `{results['command']}` started {results['started']}, "
        f"took {results.get('elapsed_s', 0) / 60:.0f} min.\n\n"
        f"Machine: {m['nproc']} cores ({m['cpu']}), {m['memory_gb']} GB RAM, Linux {m['kernel']}, "
        f"load average at start {m['load_avg_at_start']} (shared with other engineers' jobs: expect noise); "
        f"{m['kafka']}; {m['java']}.\n\n"
        "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + "."
    )


def render(results: dict[str, Any]) -> str:
    parts = [
        machine_section(results),
        targets(results),
        noop_section(results)[0],
        io_section(results)[0],
        latency_section(results)[0],
        hotkey_section(results),
        backlog_section(results)[0],
        spark_section(results),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"
