"""``laneway catalog search --limit 0`` (or -1) printed "no match": a limit under 1 is refused,
exit 2, before a Spark session starts."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from laneway.ops import cli, spark_cli


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_a_limit_under_one_is_refused_before_spark_starts(
    monkeypatch: pytest.MonkeyPatch, limit: str
) -> None:
    sessions: list[Any] = []
    monkeypatch.setattr(spark_cli, "_session", lambda *args: sessions.append(args))
    if not any(g.name == "catalog" for g in cli.app.registered_groups):
        cli._register_subcommands()
    result = CliRunner().invoke(cli.app, ["catalog", "search", "orders", "--limit", limit])
    assert result.exit_code == 2, result.output
    assert "--limit" in result.output and "no match" not in result.output
    assert sessions == []
