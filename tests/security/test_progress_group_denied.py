"""The Spark pipeline's progress group (:class:`laneway.spark.progress.GroupProgress`) when the
ACLs deny it: one warning naming the group and the grant, and no commit attempted, so a
``run_pipeline`` (which, unlike ``laneway pipeline run``, does not check the group first) goes
on at once. A consumer's commit to a denied group waited ~45 s for a coordinator, every batch.

No Spark: the class is what the pipeline calls after each batch.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from laneway.spark.progress import GroupProgress
from tests.security.conftest import AppTopicFactory, SecureBroker
from tests.security.support import committed


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "laneway.spark.progress" and r.levelno >= 30]


def test_a_denied_progress_group_is_one_warning_and_no_commit(
    secure_broker: SecureBroker, app_topic: AppTopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="laneway.spark.progress")
    topic = app_topic(partitions=2)
    denied = f"other-{uuid.uuid4().hex[:8]}"  # the app user may use app-* groups only
    progress = GroupProgress(secure_broker.bootstrap, denied, topic, secure_broker.settings("app"))
    try:
        assert progress.commit({0: 1, 1: 0}) is False
        assert progress.commit({0: 2, 1: 0}) is False  # the next batch: no second try, no second line
        assert progress._consumer is None  # never a consumer that would wait for a coordinator
    finally:
        progress.close()
    said = _warnings(caplog)
    assert len(said) == 1, said
    assert denied in said[0] and "access denied" in said[0] and "the pipeline goes on" in said[0], said
    assert progress.disabled is not None and denied in progress.disabled


def test_an_allowed_progress_group_is_committed(
    secure_broker: SecureBroker, app_topic: AppTopicFactory, caplog: pytest.LogCaptureFixture
) -> None:
    topic = app_topic(partitions=2)
    group = f"app-{uuid.uuid4().hex[:8]}-pipeline"
    progress = GroupProgress(secure_broker.bootstrap, group, topic, secure_broker.settings("app"))
    try:
        assert progress.commit({0: 3, 1: 1}) is True
        assert progress.commit({0: 4, 1: 1}) is True
    finally:
        progress.close()
    assert committed(secure_broker.client("admin"), group, topic, 2) == {0: 4, 1: 1}
    assert _warnings(caplog) == []
