"""``laneway top URL [URL ...]``: a live terminal view of the running instances of one group.

Each URL is an instance's HTTP endpoint (``host:port`` or ``http://host:port``); its
``/status`` document (:mod:`laneway.monitor.status`) is read every ``--interval`` seconds. Rates
(records/s, retries/s, dead letters/s) and the p50/p99 handler times are taken over the last
interval; the partitions are sorted worst first (stalled, then the oldest unfinished record,
then the lag), as many as fit the terminal. ``--once`` prints one frame (two reads one
interval apart) and exits; piped (stdout not a terminal), it prints one plain frame per
interval instead of redrawing the screen.
"""

from __future__ import annotations

import http.client
import math
import time
import urllib.error
import urllib.request
from typing import Annotated, Any

import orjson
import typer
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.table import Table
from rich.text import Text

from laneway.monitor.status import quantile

__all__ = ["fetch", "register", "render"]

Doc = dict[str, Any]


def status_url(target: str) -> str:
    url = target if "://" in target else f"http://{target}"
    url = url.rstrip("/")
    return url if url.endswith("/status") else f"{url}/status"


def fetch(target: str, timeout: float = 3.0) -> Doc | None:
    """One instance's ``/status`` document, or None when it does not answer, or answers
    something else than HTTP (another service's port) or than JSON."""
    try:
        with urllib.request.urlopen(status_url(target), timeout=timeout) as r:
            doc: Doc = orjson.loads(r.read())
            return doc
    except (OSError, ValueError, urllib.error.URLError, http.client.HTTPException):
        return None


def _totals(docs: list[Doc]) -> dict[str, Any]:
    """Counters summed over the instances: processed, retries, dead letters, the histogram."""
    processed = retries = letters = 0
    buckets: dict[str, float] = {}
    for doc in docs:
        for h in doc["handlers"]:
            processed += h["processed"]
            retries += h["retries"]
            letters += sum(h["dead_letters"].values())
            for le, n in h["processing_seconds"]["buckets"]:
                buckets[str(le)] = buckets.get(str(le), 0) + n
    return {"processed": processed, "retries": retries, "letters": letters, "buckets": buckets}


def _down(docs: list[Doc | None], urls: list[str] | None) -> str:
    """`` (down: ADDRESS, ...)`` for the instances that did not answer, when their addresses are known."""
    if urls is None:
        return ""
    down = [u for u, d in zip(urls, docs, strict=False) if d is None]
    return f" (down: {', '.join(down)})" if down else ""


def _hist(buckets: dict[str, float]) -> list[tuple[float, float]]:
    return sorted((float("inf") if le == "+Inf" else float(le), n) for le, n in buckets.items())


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.1f}ms" if seconds < 1 else f"{seconds:.1f}s"


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m" if seconds < 3600 else f"{seconds / 3600:.1f}h"


def _since(now: Doc, then: Doc | None) -> dict[str, Any]:
    """One instance's counts between two reads: none without an earlier read (its whole
    lifetime's counts are no rate). A count that went down is a restart's: its counts since
    then are the new ones."""
    if then is None:
        return {"processed": 0, "retries": 0, "letters": 0, "buckets": {}}
    a, b = _totals([now]), _totals([then])
    if a["processed"] < b["processed"] or a["retries"] < b["retries"] or a["letters"] < b["letters"]:
        b = _totals([])
    return {
        "processed": a["processed"] - b["processed"],
        "retries": a["retries"] - b["retries"],
        "letters": a["letters"] - b["letters"],
        "buckets": {le: n - b["buckets"].get(le, 0) for le, n in a["buckets"].items()},
    }


def render(
    docs: list[Doc | None],
    before: list[Doc | None] | None,
    elapsed: float,
    height: int = 24,
    urls: list[str] | None = None,
) -> Group:
    """One frame of the view from the instances' documents (``before``: the previous read, in
    the same order; ``urls``: their addresses, to name those that do not answer). Rates add up
    each instance's counts between the reads: one that stopped answering, or missed the last
    read, counts nothing; one that restarted counts what it did since."""
    live = [d for d in docs if d is not None]
    groups = sorted({str(d["group"]) for d in live})
    group = ", ".join(groups) if groups else "?"
    span = max(elapsed, 1e-9)
    rate = retries = letters = 0.0
    window: dict[str, float] = {}
    if before is not None:
        for i, d in enumerate(docs):
            if d is None:
                continue
            got = _since(d, before[i] if i < len(before) else None)
            rate += got["processed"] / span  # handled, not fetched
            retries += got["retries"] / span
            letters += got["letters"] / span
            for le, n in got["buckets"].items():
                window[le] = window.get(le, 0) + n
    else:
        window = _totals(live)["buckets"]
    hist = _hist(window)
    mem = sum(d["process"]["events_in_memory"] for d in live)
    cap = sum(d["process"]["max_events"] for d in live)
    running = sum(d["process"]["running"] for d in live)
    workers = sum(d["process"]["workers"] for d in live)
    rebalances = sum(sum(d["process"]["rebalances"].values()) for d in live)
    failed = sum(d["process"]["commits"].get("failed", 0) for d in live)
    lines: list[Any] = [
        Text(
            f"laneway top  {'groups' if len(groups) > 1 else 'group'} {group}  {len(live)}/{len(docs)} up"
            f"{_down(docs, urls)}  {time.strftime('%H:%M:%S')}",
            style="bold",
        ),
        Text(
            f"{rate:,.0f} rec/s  p50 {_ms(quantile(hist, 0.5))}  p99 {_ms(quantile(hist, 0.99))}  "
            f"mem {mem}/{cap}  util {100 * running / workers if workers else 0:.0f}%"
        ),
        Text(
            f"retries {retries:.1f}/s  dead letters {letters:.1f}/s  rebalances {rebalances}  "
            f"commits refused {failed}"
        ),
    ]
    stalled = [s for d in live for s in d["stalled"]]
    lines.extend(Text(f"STALLED {s}", style="bold red") for s in stalled[:3])
    hot: dict[tuple[str, str], int] = {}
    for d in live:
        for h in d["process"]["hot_keys"]:
            k = (h["topic"], h["key"] if h["key"] is not None else "<null>")
            hot[k] = hot.get(k, 0) + h["records"]
    top = sorted(hot.items(), key=lambda kv: kv[1], reverse=True)[:5]
    hot_line = HotKeys([f"{t}:{k} {n}" for (t, k), n in top])
    parts = sorted(
        (p for d in live for p in d["partitions"]),
        key=lambda p: (not p["stalled"], -p["oldest_age_s"], -(p["lag"] or 0)),
    )
    room = max(1, height - len(lines) - 3)  # the table's header, the hot keys, the prompt
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    for name, justify in (
        ("partition", "left"),
        ("commit", "right"),
        ("lag", "right"),
        ("t.lag", "right"),
        ("oldest", "right"),
        ("key@offset", "left"),
        ("gap", "right"),
        ("run/q", "right"),
        ("P", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis")  # type: ignore[arg-type]
    for p in parts[:room]:
        key = p["oldest_key"]
        where = (
            "-" if p["oldest_offset"] is None else f"{key if key is not None else '?'}@{p['oldest_offset']}"
        )
        table.add_row(
            f"{p['topic']}[{p['partition']}]",
            "-" if p["committed"] is None else str(p["committed"]),
            "-" if p["lag"] is None else str(p["lag"]),
            _age(p["time_lag_s"]),
            _age(p["oldest_age_s"]) if p["oldest_offset"] is not None else "-",
            where[:24],
            str(p["gap"]),
            f"{p['in_flight']}/{p['queued']}",
            "P" if p["paused"] else "",
            style="red" if p["stalled"] else None,
        )
    if len(parts) > room:
        lines.append(Text(f"({len(parts) - room} more partitions not shown)", style="dim"))
    return Group(*lines, table, hot_line)


class HotKeys:
    """The hot keys line, as many whole entries as the width takes (the line was cut by the
    width, mid-entry: ``... app-in:k27 160  app-in:``); the ones left out are counted."""

    def __init__(self, entries: list[str]) -> None:
        self.entries = entries

    def line(self, width: int) -> str:
        shown = list(self.entries)
        while shown:
            rest = len(self.entries) - len(shown)
            text = "hot keys: " + "  ".join(shown) + (f"  (+{rest} more)" if rest else "")
            if cell_len(text) <= width:
                return text
            shown.pop()
        return "hot keys: -" if not self.entries else f"hot keys: ({len(self.entries)}, too wide to show)"

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text(self.line(options.max_width), no_wrap=True, overflow="ellipsis")


def register(app: typer.Typer) -> None:
    """Add ``top`` to the root ``laneway`` app."""

    @app.command("top")
    def top(
        urls: Annotated[
            list[str], typer.Argument(help="instances' HTTP endpoints: host:port or http://host:port")
        ],
        once: Annotated[bool, typer.Option("--once", help="print one frame and exit")] = False,
        interval: Annotated[float, typer.Option(help="seconds between reads")] = 1.0,
        refreshes: Annotated[int, typer.Option(hidden=True, help="stop after this many frames (tests)")] = 0,
    ) -> None:
        """A live view of running instances of one group: throughput, p50/p99, per partition the
        commit position, lag, time lag, oldest unfinished record (its key and offset), gap,
        paused; retries and dead letters per second, hot keys, rebalances; stalled partitions.

        On a terminal the view redraws in place; piped (to a file, less), it prints one plain
        frame per interval instead, every partition in it.

        Example: laneway top 127.0.0.1:9100 127.0.0.1:9101
        """
        if not 0 < interval < math.inf:  # time.sleep refuses a negative, NaN or endless pause
            typer.secho(
                f"error: --interval must be a number of seconds more than 0, not {interval:g}",
                err=True,
                fg="red",
            )
            raise typer.Exit(2)
        seen: dict[str, str] = {}
        for u in urls:  # an instance given twice (as host:port and http://host:port) counts once
            seen.setdefault(status_url(u), u)
        urls = list(seen.values())
        console = Console(highlight=False)
        before = [fetch(u) for u in urls]
        if all(d is None for d in before):
            typer.secho(
                f"error: no Laneway instance answered at {', '.join(urls)}", err=True, fg=typer.colors.RED
            )
            raise typer.Exit(2)  # unreachable, as every command exits for a bad address
        taken = time.monotonic()
        if once or not console.is_terminal:  # piped: one frame per interval, no screen control
            count = 0
            try:
                while True:
                    time.sleep(interval)
                    docs = [fetch(u) for u in urls]
                    now = time.monotonic()
                    # piped, nothing scrolls off a screen: every partition
                    height = console.size.height if console.is_terminal else 1_000_000
                    console.print(render(docs, before, now - taken, height, urls))
                    console.file.flush()  # a pipe buffers: a reader (tail -f, less) sees each frame now
                    before, taken = docs, now
                    count += 1
                    if once or (refreshes and count >= refreshes):
                        return
            except KeyboardInterrupt:
                return
        from rich.live import Live

        with Live(console=console, screen=True, auto_refresh=False) as view:
            try:
                count = 0
                while not refreshes or count < refreshes:
                    time.sleep(interval)
                    docs = [fetch(u) for u in urls]
                    now = time.monotonic()
                    view.update(render(docs, before, now - taken, console.size.height, urls), refresh=True)
                    before, taken = docs, now
                    count += 1
            except KeyboardInterrupt:
                pass
