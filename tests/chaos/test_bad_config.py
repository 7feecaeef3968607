"""Bad configuration: ``laneway run`` refuses to start, with one line on stderr naming the
field and the reason, and a non-zero exit code."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.chaos.conftest import StreamTopic
from tests.chaos.support import LANEWAY

#: case -> the field the error line must name
FIELDS = {
    "unreachable_brokers": "bootstrap_servers",
    "malformed_bootstrap": "bootstrap_servers",
    "missing_topic": "topic",
    "missing_dead_letter_topic": "dead_letter_topic",
    "invalid_group_id": "group_id",
    "concurrency_zero": "concurrency",
    "negative_delay": "delay",
    "negative_timeout": "timeout",
    "zero_attempts": "retry.max_attempts",
    "zero_backpressure": "backpressure.max_events",
    "unknown_app_option": "concurency",
    "unknown_kafka_option": "no.such.property",
    "bad_kafka_value": "session.timeout.ms",
}


@pytest.fixture(scope="module")
def existing_topic(kafka_bootstrap: str) -> str:
    from tests.chaos.support import create_topics

    name = f"chaos-cfg-{os.getpid()}-{time.monotonic_ns()}"
    create_topics(kafka_bootstrap, {name: 1, f"{name}.dlq": 1})
    return name


@pytest.mark.parametrize("case", sorted(FIELDS))
def test_bad_setting_refuses_to_start_with_one_line(
    case: str, kafka_bootstrap: str, existing_topic: str, stream_topic: StreamTopic
) -> None:
    env = {**os.environ, "LW_CASE": case, "LW_BOOTSTRAP": kafka_bootstrap, "LW_TOPIC": existing_topic}
    t0 = time.monotonic()
    run = subprocess.run(
        [LANEWAY, "run", "tests.chaos.badconfig:app"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    took = time.monotonic() - t0
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert run.returncode != 0, f"started anyway: {run.stderr[-500:]}"
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n" + "\n".join(lines[:15])
    line = lines[0]
    field = FIELDS[case]
    assert line.startswith("error: ") and field in line, line
    assert len(line) > len("error: ") + len(field) + 10, f"no reason given: {line}"
    assert took < 30
