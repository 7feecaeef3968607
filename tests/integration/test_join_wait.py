"""A restart after ``kill -9``: the killed process's consumer holds the group's partitions until
its session times out, and the new app says so at INFO instead of sitting silent after
"<app> started" (it said nothing for ~40 s with the default session.timeout.ms)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys

import pytest

from laneway import App, Timeouts
from tests.conftest import TopicFactory

#: a consumer of the group that says when it has its partitions, then is killed with -9
_HOLDER = """
import os, sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": os.environ["LW_BOOTSTRAP"], "group.id": os.environ["LW_GROUP"],
              "session.timeout.ms": 9000, "heartbeat.interval.ms": 500,
              "partition.assignment.strategy": "cooperative-sticky"})  # as a Laneway app's
c.subscribe([os.environ["LW_TOPIC"]], on_assign=lambda c, p: print("assigned", len(p), flush=True))
while True:
    c.poll(0.2)
"""


@pytest.mark.timeout(120)
def test_a_restart_after_kill_9_says_it_waits_for_the_group(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic = make_topic(partitions=2)
    env = {**os.environ, "LW_BOOTSTRAP": kafka_bootstrap, "LW_GROUP": group_id, "LW_TOPIC": topic}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith("assigned 2"), "the holder never got its partitions"
    finally:
        holder.send_signal(signal.SIGKILL)  # no LeaveGroup: the group keeps it for 9 s
        holder.wait()
    app = App(
        "restarted",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        timeouts=Timeouts(startup=30),
        kafka_config={"session.timeout.ms": 9000},
    )
    app.handler(topic, on_failure="halt")(lambda ev: None)
    with caplog.at_level(logging.INFO, logger="laneway.app"):
        assigned = app.run_until(lambda: any(src.assignment for src in app.sources), timeout=60)

    def waits() -> list[str]:
        return [r.getMessage() for r in caplog.records if "no partitions assigned yet" in r.getMessage()]

    assert assigned, "the group never assigned the partitions"
    # the killed member held them about 9 s: one line at 5 s (the next would be at 20 s)
    assert "Inconsistent group protocol" not in caplog.text  # the holder is a member like the app
    assert len(waits()) == 1, caplog.text
    assert f"joining group '{group_id}'" in waits()[0]
    assert "session.timeout.ms (9000 ms)" in waits()[0]
