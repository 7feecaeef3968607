"""The simulated metadata source: deterministic answers, variable latency, bounded transient failures."""

from __future__ import annotations

import pytest

from laneway.catalog.models import CatalogError
from laneway.catalog.source import SimulatedSource, SourceUnavailable, source_attributes


def test_answers_are_a_function_of_the_version() -> None:
    a = source_attributes("table", "table:sales.orders", 3)
    assert a == source_attributes("table", "table:sales.orders", 3)
    assert a["source.etag"] != source_attributes("table", "table:sales.orders", 4)["source.etag"]
    assert a["source.location"] == "s3://warehouse/sales/orders"
    assert all(k.startswith("source.") for k in a)
    assert "source.stats_rows" in source_attributes("column", "column:a.b.c", 1)


def test_latency_varies_and_failures_are_transient_and_bounded() -> None:
    sleeps: list[float] = []
    source = SimulatedSource(median_latency=0.01, failure_rate=0.5, max_failures_per_request=2, seed=1,
                             sleep=sleeps.append)  # fmt: skip
    for version in range(1, 201):
        for attempt in range(3):
            try:
                got = source.fetch("table", "table:sales.orders", version)
            except SourceUnavailable as exc:
                assert isinstance(exc, CatalogError) and exc.attempt == attempt + 1
                assert attempt < 2
                continue
            assert got == source_attributes("table", "table:sales.orders", version)
            break
        else:
            pytest.fail("a request failed more than max_failures_per_request times")
    assert 50 < source.failures < 300 and source.calls == 200 + source.failures
    assert min(sleeps) < 0.01 < max(sleeps)


def test_no_failures_when_the_rate_is_zero() -> None:
    source = SimulatedSource(median_latency=0.0, failure_rate=0.0)
    assert all(source.fetch("owner", "owner:alice", v) for v in range(1, 50))
    with pytest.raises(ValueError):
        SimulatedSource(failure_rate=1.0)
