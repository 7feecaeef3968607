"""`laneway catalog sync --until-caught-up`'s give-up: bounded by --timeout and a short drain."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from laneway.catalog import producing, sync
from laneway.engine.policies import Timeouts
from laneway.kafka.access import KafkaAccessDenied
from laneway.ops import catalog_cli, cli


class _Built(Exception):
    """Raised by the fake CatalogSync once the command has built its settings."""


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []

    def fake_sync(settings: Any, **_: Any) -> None:
        seen.append(settings)
        raise _Built

    monkeypatch.setattr(sync, "CatalogSync", fake_sync)
    monkeypatch.setattr(producing, "ensure_topics", lambda *a, **k: [])
    monkeypatch.setattr(catalog_cli, "_check_access", lambda *a: None)
    return seen


def _sync(args: list[str]) -> Any:
    if not any(g.name == "catalog" for g in cli.app.registered_groups):
        cli._register_subcommands()
    return CliRunner().invoke(cli.app, ["catalog", "sync", "-b", "127.0.0.1:1", *args])


def test_until_caught_up_drains_briefly_when_it_gives_up(built: list[Any]) -> None:
    result = _sync(["--until-caught-up", "--timeout", "2"])
    assert isinstance(result.exception, _Built), result.output
    assert built[0].shutdown_timeout == min(Timeouts().shutdown, catalog_cli.GIVE_UP_DRAIN) < 30


def test_a_run_until_ctrl_c_drains_as_an_app_does(built: list[Any]) -> None:
    result = _sync([])
    assert isinstance(result.exception, _Built), result.output
    assert built[0].shutdown_timeout == Timeouts().shutdown


def test_a_negative_timeout_is_refused(built: list[Any]) -> None:
    result = _sync(["--until-caught-up", "--timeout", "-1"])
    assert result.exit_code == 2 and not built, result.output
    assert "--timeout" in result.output


def test_the_sync_app_gets_the_shutdown_timeout() -> None:
    s = sync.SyncSettings(bootstrap_servers="127.0.0.1:1", shutdown_timeout=3.0)
    built = sync.CatalogSync(s)
    try:
        assert built.app.settings.timeouts.shutdown == 3.0
    finally:
        built.close()
    with pytest.raises(ValueError, match="shutdown_timeout"):
        sync.SyncSettings(bootstrap_servers="127.0.0.1:1", shutdown_timeout=-1)


def _denied(what: str) -> KafkaAccessDenied:
    return KafkaAccessDenied("sasl.username", f"access denied: {what}", "GROUP_AUTHORIZATION_FAILED")


def test_a_denied_group_is_found_before_any_topic_is_created(
    built: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Any] = []

    def check(address: str, topics: dict[str, str], group: str | None = None) -> None:
        calls.append(("check", sorted(topics), group))
        raise _denied("use group 'g'")

    monkeypatch.setattr(catalog_cli, "_check_access", check)
    monkeypatch.setattr(producing, "ensure_topics", lambda *a, **k: calls.append("create") or [])
    result = _sync(["--group-id", "g", "--changes-topic", "c", "--entities-topic", "e"])
    assert result.exit_code == 2 and not built, result.output
    assert calls == [("check", ["c", "catalog.changes.dlq", "e"], "g")]
    assert result.stderr.strip() == "error: access denied: use group 'g'"


def test_a_created_topic_denied_once_created_is_named_left_in_place(
    built: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Create granted, Write not: only a topic that exists can be checked, so the line says
    which topics this run created."""
    checks: list[dict[str, str]] = []

    def check(address: str, topics: dict[str, str], group: str | None = None) -> None:
        checks.append(topics)
        if len(checks) == 2:
            raise _denied("write to topic 'e'")

    monkeypatch.setattr(catalog_cli, "_check_access", check)
    monkeypatch.setattr(producing, "ensure_topics", lambda *a, **k: ["e"])
    result = _sync(["--group-id", "g", "--changes-topic", "c", "--entities-topic", "e"])
    assert result.exit_code == 2 and not built, result.output
    assert checks[1] == {"e": "write to"}
    assert result.stderr.strip() == (
        "error: access denied: write to topic 'e'; this run created 'e', left in place"
    )


@pytest.mark.parametrize(
    "option", ["--changes-topic", "--entities-topic", "--dead-letter-topic", "--group-id"]
)
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_name_is_one_line_and_exit_2(built: list[Any], option: str, value: str) -> None:
    # the client raised "ValueError: Empty topic name" (a traceback, exit 1) from deep in the run
    result = _sync([option, value, "--until-caught-up"])
    assert result.exit_code == 2, result.output
    assert f"error: {option}: must not be empty" in result.output
    assert built == []  # refused before anything was built


def test_a_setting_the_app_refuses_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    from laneway.errors import ConfigError

    def refusing(settings: Any, **_: Any) -> None:
        raise ConfigError("concurrency", "must be at most 4096")

    monkeypatch.setattr(sync, "CatalogSync", refusing)
    monkeypatch.setattr(producing, "ensure_topics", lambda *a, **k: [])
    monkeypatch.setattr(catalog_cli, "_check_access", lambda *a: None)
    result = _sync(["--until-caught-up"])
    assert result.exit_code == 2, result.output
    assert "error: " in result.output and "must be at most 4096" in result.output
    assert "Traceback" not in result.output
