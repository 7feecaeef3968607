"""The pipeline's progress commit waits ``timeout`` at most for the broker's answer, says a
failure once (not once per batch), and says when commits land again. A fake consumer stands in
for the broker: it answers a commit only when told to."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from laneway.spark import progress as progress_mod
from laneway.spark.progress import GroupProgress


class FakeConsumer:
    """Takes commits; its polls call the commit callback with the answers queued in ``answers``."""

    def __init__(self, config: dict[str, Any], logger: Any = None) -> None:
        self.on_commit = config["on_commit"]
        self.answers: list[tuple[KafkaError | None, list[TopicPartition]]] = []
        self.commits: list[list[TopicPartition]] = []
        instances.append(self)

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert asynchronous  # a synchronous commit cannot be bounded
        self.commits.append(offsets)

    def poll(self, timeout: float) -> None:
        while self.answers:
            self.on_commit(*self.answers.pop(0))

    def close(self) -> None:
        pass


instances: list[FakeConsumer] = []


@pytest.fixture
def group(monkeypatch: pytest.MonkeyPatch) -> GroupProgress:
    instances.clear()
    monkeypatch.setattr(progress_mod, "Consumer", FakeConsumer)
    monkeypatch.setattr(progress_mod, "AdminClient", lambda config, logger=None: object())
    monkeypatch.setattr(progress_mod, "check_group", lambda *a, **k: None)  # the ACLs allow it
    return GroupProgress("127.0.0.1:9092", "pipeline", "t", timeout=0.05)


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == progress_mod.__name__ and r.levelno == level]


def test_an_unanswered_commit_gives_up_after_its_timeout_and_warns_once(
    group: GroupProgress, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=progress_mod.__name__)
    assert group.commit({0: 5}) is False  # nobody answers
    assert group.commit({0: 6}) is False
    assert group.committed == {}
    warned = _lines(caplog, logging.WARNING)
    assert warned == ["could not commit the pipeline's progress to group pipeline: no answer within 0.05s"]
    assert len(_lines(caplog, logging.DEBUG)) == 1  # the second failure: a debug line

    consumer = instances[0]
    consumer.answers.append((None, [TopicPartition("t", 0, 6)]))  # a late answer to the last commit
    consumer.answers.append((None, [TopicPartition("t", 0, 7)]))
    assert group.commit({0: 7}) is True
    assert group.committed == {0: 7}
    assert _lines(caplog, logging.INFO) == [
        "committing the pipeline's progress to group pipeline works again"
    ]


def test_a_late_answer_to_an_earlier_commit_is_not_taken_for_the_answer(group: GroupProgress) -> None:
    assert group.commit({0: 5}) is False
    instances[0].answers.append((None, [TopicPartition("t", 0, 5)]))  # the first commit's, late
    assert group.commit({0: 6}) is False  # its own answer has not come
    assert group.committed == {}


def test_a_refused_commit_names_the_error(group: GroupProgress, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=progress_mod.__name__)
    assert group.commit({0: 1}) is False  # builds the consumer
    refused = SimpleNamespace(
        partition=0, offset=2, error=KafkaError(KafkaError.OFFSET_METADATA_TOO_LARGE, "big")
    )
    instances[0].answers.append((None, [refused]))  # type: ignore[list-item]
    assert group.commit({0: 2}) is False
    assert _lines(caplog, logging.DEBUG) == [
        "could not commit the pipeline's progress to group pipeline: big"
    ]


def test_an_access_check_that_cannot_answer_leaves_it_to_the_commit(
    group: GroupProgress, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a denial ends the group's use; a check that timed out is no reason to crash or stop."""

    def no_answer(*args: Any, **kwargs: Any) -> None:
        raise TimeoutError

    monkeypatch.setattr(progress_mod, "check_group", no_answer)
    assert group.commit({0: 1}) is False  # the commit was tried: nobody answered it either
    assert group.disabled is None and len(instances) == 1 and len(instances[0].commits) == 1


def test_the_offset_log_gives_a_batch_s_end_offsets(tmp_path: Any) -> None:
    """A stop can cut off the commit marker of the batch that landed last: its offsets are read
    from the checkpoint's offset log, as Spark wrote it."""
    from laneway.spark.progress import logged_offsets

    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n'
        '{"other":{"0":5}}\n{"catalog.entities":{"0":9682,"1":7568,"2":10355,"3":8993}}\n'
    )
    assert logged_offsets(str(tmp_path), 3, "catalog.entities") == {0: 9682, 1: 7568, 2: 10355, 3: 8993}
    assert logged_offsets(f"file://{tmp_path}", 3, "catalog.entities") == {
        0: 9682,
        1: 7568,
        2: 10355,
        3: 8993,
    }
    assert logged_offsets(str(tmp_path), 3, "missing") is None
    assert logged_offsets(str(tmp_path), 4, "catalog.entities") is None  # no such batch
    assert logged_offsets("s3a://bucket/checkpoint", 3, "catalog.entities") is None  # not read remotely
