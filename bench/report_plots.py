"""The report's plots (PNG): throughput against concurrency, the latency CDFs, RSS over a backlog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report_common import Run, contender_order, group, med


def plots(results: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    order = contender_order(results)
    colors = {c: f"C{i}" for i, c in enumerate(order)}

    io = results["scenarios"].get("io")
    if io:
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        by = group(io["runs"], lambda r: (r["contender"], r["concurrency"]))
        concs = sorted({k[1] for k in by})
        ax.plot(concs, [c / io["sleep_s"] for c in concs], "k--", lw=1, label="ideal: concurrency / 5 ms")
        for c in order:
            pts = sorted((k[1], med(r["rate"] for r in rs)) for k, rs in by.items() if k[0] == c)
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, "o-" if len(xs) > 1 else "s", color=colors[c], label=c)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("concurrency")
        ax.set_ylabel("records/s (median)")
        ax.set_title("5 ms I/O handler, 10,000 keys, 8 partitions")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        made.append(_save(fig, out / "throughput_vs_concurrency.png"))

    for name, title, fname in (
        ("latency", "produce → handled, no-op handler at a fixed rate", "latency_cdf.png"),
        ("hotkey", "hot-key skew: other keys (solid) and the hot key (dotted)", "hotkey_latency.png"),
    ):
        sc = results["scenarios"].get(name)
        if not sc:
            continue
        default_rate = sc.get("rate", 0)

        def rate_and_contender(r: Run, d: float = default_rate) -> tuple[float, str]:
            return (r.get("rate_target", d), r["contender"])

        by = group(sc["runs"], rate_and_contender)
        rates = sorted({k[0] for k in by})
        cols = 2 if len(rates) > 1 else 1
        rows_n = (len(rates) + cols - 1) // cols
        fig, axes = plt.subplots(rows_n, cols, figsize=(7.5 * cols, 4.8 * rows_n), squeeze=False, sharex=True)
        for ri, rate in enumerate(rates):
            ax = axes[ri // cols][ri % cols]
            for c in order:
                rs = [r for r in by.get((rate, c), []) if r.get("latency_other", {}).get("n")]
                if not rs:
                    continue
                r = sorted(rs, key=lambda r: r["latency_other"]["p99"])[len(rs) // 2]  # the median run
                cdf = r["latency_other"]["cdf"]
                fractions = [i / (len(cdf) - 1) for i in range(len(cdf))]
                ax.plot(cdf, fractions, color=colors[c], label=c)
                if name == "hotkey" and r.get("latency_hot", {}).get("n"):
                    hc = r["latency_hot"]["cdf"]
                    ax.plot(hc, [i / (len(hc) - 1) for i in range(len(hc))], ":", color=colors[c])
            ax.set_xscale("log")
            ax.set_xlabel("latency, ms (log)")
            ax.set_ylabel("fraction of records")
            ax.set_title(f"{title}, {rate:,.0f} records/s")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=8)
        for extra in range(len(rates), rows_n * cols):
            axes[extra // cols][extra % cols].set_visible(False)
        made.append(_save(fig, out / fname))

    bl = results["scenarios"].get("backlog")
    if bl:
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        styles = ["-", "--", ":", "-."]
        for r in bl["runs"]:
            tl = r.get("rss_timeline") or []
            if not tl:
                continue
            i = bl["depths"].index(r["depth"]) if r["depth"] in bl["depths"] else 0
            xs, ys = zip(*tl, strict=True)
            ax.plot(
                xs,
                ys,
                styles[i % len(styles)],
                color=colors.get(r["contender"], "k"),
                label=f"{r['contender']}, {r['depth']:,}",
            )
        ax.set_xscale("log")
        ax.set_xlabel("seconds since the process started (log)")
        ax.set_ylabel("RSS, MB")
        ax.set_title("memory while consuming a backlog")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        made.append(_save(fig, out / "backlog_rss.png"))
    return made


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
