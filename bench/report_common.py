"""What the report's sections and plots share: medians, runs grouped, cells, markdown tables."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

Run = dict[str, Any]


def med(xs: Iterable[float]) -> float:
    xs = list(xs)
    return statistics.median(xs) if xs else 0.0


def group(runs: list[Run], key: Callable[[Run], Any]) -> dict[Any, list[Run]]:
    out: dict[Any, list[Run]] = defaultdict(list)
    for r in runs:
        out[key(r)].append(r)
    return out


def per_million(r: Run) -> float:
    n = max(1, int(r.get("limit", 1)))
    return float(r.get("cpu_window_s", 0.0)) / n * 1e6


def verdict(runs: list[Run]) -> str:
    ok = sum(1 for r in runs if r.get("correct"))
    if ok == len(runs):
        return f"ok ({ok}/{len(runs)})"
    notes = sorted({n for r in runs for n in r.get("notes", [])})
    return f"**FAIL** {ok}/{len(runs)}: " + "; ".join(notes)[:160]


def fmt(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def contender_order(results: dict[str, Any]) -> list[str]:
    return list(results.get("contenders", []))
