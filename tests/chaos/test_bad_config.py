"""Bad configuration: ``laneway run`` refuses to start, with one line on stderr naming the
field and the reason, and exit code 2 (a bad setting, whether found while the module builds its
app or at start)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from tests.chaos.support import LANEWAY, create_topics

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
    "auto_commit_on": "enable.auto.commit",
}


@pytest.fixture(scope="module")
def existing_topic(kafka_admin: AdminClient) -> Iterator[str]:
    name = f"chaos-cfg-{uuid.uuid4().hex[:12]}"
    create_topics(kafka_admin, {name: 1, f"{name}.dlq": 1})
    yield name
    for f in kafka_admin.delete_topics([name, f"{name}.dlq"], operation_timeout=30).values():
        with contextlib.suppress(Exception):  # best effort
            f.result(timeout=30)


@pytest.fixture(scope="module")
def runs(kafka_bootstrap: str, existing_topic: str) -> dict[str, tuple[int, str, float]]:
    """Every case's ``laneway run`` at once (they mostly wait on imports): exit code, stderr, seconds."""
    started = {}
    for case in FIELDS:
        env = {**os.environ, "LW_CASE": case, "LW_BOOTSTRAP": kafka_bootstrap, "LW_TOPIC": existing_topic}
        proc = subprocess.Popen(
            [LANEWAY, "run", "tests.chaos.badconfig:app"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        started[case] = (proc, time.monotonic())
    out = {}
    for case, (proc, t0) in started.items():
        try:
            _, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        out[case] = (proc.returncode, err, time.monotonic() - t0)
    return out


@pytest.mark.parametrize("case", sorted(FIELDS))
def test_bad_setting_refuses_to_start_with_one_line(
    case: str, runs: dict[str, tuple[int, str, float]]
) -> None:
    code, stderr, took = runs[case]
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code == 2, f"exit code {code}: {stderr[-500:]}"
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n" + "\n".join(lines[:15])
    line = lines[0]
    field = FIELDS[case]
    assert line.startswith("error: ") and field in line, line
    assert len(line) > len("error: ") + len(field) + 10, f"no reason given: {line}"
    assert took < 60
