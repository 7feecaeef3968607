"""The "revoked ..." line says what was committed. It said ``committed {...}`` even when the
committer refused the commit (emitted records had failed to produce before), so operators read
a commit that never happened."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from laneway.kafka.commit import OutputError
from laneway.kafka.hooks import SourceMetrics
from laneway.kafka.rebalance import RebalanceCallbacks


class _Committer:
    def __init__(self, failed: BaseException | None) -> None:
        self.failed = failed
        self.committed: list[dict[Any, Any]] = []
        self.asynchronous: list[bool] = []
        self.closing = False

    def commit(self, commits: dict[Any, Any], *, asynchronous: bool) -> None:
        if commits and self.failed is None:
            self.committed.append(commits)
            self.asynchronous.append(asynchronous)


class _Processor:
    def __init__(self, commits: dict[Any, Any]) -> None:
        self.commits = commits

    def revoke_commits(self, tps: Any, timeout: float, **kw: Any) -> dict[Any, Any]:
        return self.commits

    def discard_outputs(self, tps: Any) -> None: ...


class _Consumer:
    def resume(self, parts: Any) -> None: ...


def _revoke(
    caplog: pytest.LogCaptureFixture,
    commits: dict[Any, Any],
    failed: BaseException | None,
    who: str = "",
    closing: bool = False,
) -> str:
    cb = RebalanceCallbacks()
    if who:
        cb._who = who
    cb._processor = _Processor(commits)  # type: ignore[assignment]
    cb._committer = committer = _Committer(failed)  # type: ignore[assignment]
    committer.closing = closing
    cb._metrics = SourceMetrics()
    cb._assigned, cb._held = {("t", 0)}, set()
    cb._revoke_timeout, cb._metadata_limit = 1.0, 0
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="laneway.kafka.source"):
        cb._on_revoke(_Consumer(), [TopicPartition("t", 0)])  # type: ignore[arg-type]
    assert cb._assigned == set()
    assert committer.asynchronous == ([closing] if commits and failed is None else [])
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"{who}revoked")]
    return line


def test_a_commit_made_is_logged_with_its_positions(caplog: pytest.LogCaptureFixture) -> None:
    assert _revoke(caplog, {("t", 0): (2, None)}, None) == "revoked [('t', 0)], committed {('t', 0): 2}"


def test_a_revoke_in_the_close_sends_its_commit_asynchronously(caplog: pytest.LogCaptureFixture) -> None:
    """In the close (the source stopped), a synchronous commit blocked for good while a
    cooperative rebalance's second round was pending: the close serves the group until its
    answer instead, and the line says the commit was sent."""
    line = _revoke(caplog, {("t", 0): (2, None)}, None, closing=True)
    assert line == "revoked [('t', 0)], commit sent {('t', 0): 2}"


def test_a_refused_commit_is_not_logged_as_committed(caplog: pytest.LogCaptureFixture) -> None:
    failed = OutputError("emitted records could not be produced to out: Unknown topic")
    line = _revoke(caplog, {("t", 0): (2, None)}, failed)
    assert "committed {" not in line
    assert line.startswith("revoked [('t', 0)], nothing committed (emitted records could not be produced to")
    assert line.count("could not be produced") == 1 and "Unknown topic" in line and "last commit" in line


def test_nothing_to_commit_says_so(caplog: pytest.LogCaptureFixture) -> None:
    assert _revoke(caplog, {}, None) == "revoked [('t', 0)], nothing to commit"


def test_with_several_consumers_the_line_names_the_one_whose_partitions_moved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    line = _revoke(caplog, {("t", 0): (2, None)}, None, who="laneway-consumer-1: ")
    assert line == "laneway-consumer-1: revoked [('t', 0)], committed {('t', 0): 2}"
