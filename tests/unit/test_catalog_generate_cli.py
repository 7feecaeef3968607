"""`laneway catalog generate` over fakes: the stream is generated once, and a Ctrl-C while it
is generated says that nothing was sent."""

from __future__ import annotations

import dataclasses
import signal
from collections import Counter
from typing import Any

import pytest
from typer.testing import CliRunner

from laneway.catalog import generator, producing
from laneway.catalog.generator import GeneratedRecord, GeneratorConfig
from laneway.ops import catalog_cli, cli


@pytest.fixture
def produced(monkeypatch: pytest.MonkeyPatch) -> list[list[GeneratedRecord]]:
    """What the command handed to ``produce``; no broker is reached."""
    seen: list[list[GeneratedRecord]] = []

    def fake_produce(records: list[GeneratedRecord], **_: Any) -> producing.ProduceResult:
        seen.append(records)
        return producing.ProduceResult(len(records), 1.0, Counter(r.key for r in records), Counter())

    monkeypatch.setattr(producing, "produce", fake_produce)
    monkeypatch.setattr(catalog_cli, "_check_then_create", lambda *a, **k: [])
    return seen


def _generate(*args: str) -> Any:
    if not any(g.name == "catalog" for g in cli.app.registered_groups):
        cli._register_subcommands()
    argv = ["catalog", "generate", "-b", "127.0.0.1:1", "--entities", "20", "--events", "200", *args]
    return CliRunner().invoke(cli.app, argv, env={"COLUMNS": "200"})


def test_the_stream_is_generated_once_without_a_start_time(
    monkeypatch: pytest.MonkeyPatch, produced: list[list[GeneratedRecord]]
) -> None:
    # the finding: without --start-time-ms, the command generated the stream to learn its span,
    # then generated it again from the start that ends it now (~15% of a big run)
    calls: list[Any] = []
    real = generator.generate

    def counting(*args: Any, **kwargs: Any) -> list[GeneratedRecord]:
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(generator, "generate", counting)
    result = _generate("--no-progress")
    assert result.exit_code == 0, result.output
    assert len(calls) == 1 and len(produced) == 1 and len(produced[0]) == 200


def test_a_stream_ending_at_a_time_is_the_one_of_the_start_it_implies() -> None:
    # what the command produced before: generated at start 0 for the span, then at end - span
    config = GeneratorConfig(entities=20, events=300, invalid_share=0.1, seed=7)
    end = 1_800_000_000_000
    span = max(r.arrival_ms for r in generator.generate(dataclasses.replace(config, start_time_ms=0)))
    expected = generator.generate(dataclasses.replace(config, start_time_ms=end - span))
    assert generator.generate(config, ends_at_ms=end) == expected
    times = [e.event_time_ms for r in expected if (e := r.event) is not None]
    assert end - span <= min(times) and max(times) <= end


def test_an_explicit_start_time_is_kept(produced: list[list[GeneratedRecord]]) -> None:
    result = _generate("--no-progress", "--start-time-ms", "1000", "--seed", "3")
    assert result.exit_code == 0, result.output
    config = GeneratorConfig(entities=20, events=200, seed=3, start_time_ms=1000)
    assert produced == [generator.generate(config)]


class _Unhandled(Exception):
    """The test's own handler of the signal: the command set none of its own."""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_while_generating_says_nothing_was_sent(
    monkeypatch: pytest.MonkeyPatch, produced: list[list[GeneratedRecord]], signum: signal.Signals
) -> None:
    # the finding: a Ctrl-C in the seconds a big stream takes to generate exited 130 without a word
    def unhandled(*_: Any) -> None:
        raise _Unhandled

    before = signal.signal(signum, unhandled)  # a SIGTERM the command does not handle: no kill
    generated: list[int] = []

    def interrupted(config: GeneratorConfig, **_: Any) -> list[GeneratedRecord]:
        signal.raise_signal(signum)
        generated.append(1)  # not reached: the signal unwinds the generation
        return []

    monkeypatch.setattr(generator, "generate", interrupted)
    try:
        result = _generate("--no-progress", "--topic", "t1")
    finally:
        signal.signal(signum, before)
    assert not isinstance(result.exception, _Unhandled), result.output
    assert result.exit_code == 128 + signum, result.output
    assert result.stderr.strip().splitlines()[-1] == (
        "interrupted while generating the stream, before producing: nothing was sent to t1"
    )
    assert produced == [] and generated == []


@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_topic_is_one_line_and_exit_2(produced: list[list[GeneratedRecord]], value: str) -> None:
    # the client raised "ValueError: Empty topic name" (a traceback, exit 1)
    result = _generate("--topic", value)
    assert result.exit_code == 2, result.output
    assert "error: --topic: must not be empty" in result.output
    assert produced == []
