"""Clients for the secured broker's tests: produce keyed records, read a topic, commit and read
a group's offsets (:func:`commit_offsets`, :func:`committed`: asked again while the group's
coordinator is not ready), and run a command line (:func:`laneway`, every output grepped for
the passwords).

Each client helper takes the full client settings (``secure_broker.client(user)``), so the same
helper runs as admin, app or reader.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from laneway import App
from tests.kafka_ready import when_coordinator_ready

if TYPE_CHECKING:
    from tests.security.conftest import SecureBroker

ROOT = Path(__file__).resolve().parents[2]
#: a command's bounded wait (a hang fails the test; the commands answer in seconds)
BOUND = 45.0


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return orjson.loads(self.stdout)


def laneway(
    broker: SecureBroker,
    *args: str,
    config: Path | None = None,
    env_config: Path | None = None,
    timeout: float = BOUND,
) -> Ran:
    """``python -m laneway.ops.cli ARGS --bootstrap B [--client-config FILE]`` in a subprocess;
    every output is grepped for the broker's passwords."""
    env = {k: v for k, v in os.environ.items() if k not in ("LANEWAY_BOOTSTRAP", "LANEWAY_CLIENT_CONFIG")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "200"
    if env_config is not None:
        env["LANEWAY_CLIENT_CONFIG"] = str(env_config)
    extra = ["--bootstrap", broker.bootstrap] if "--help" not in args else []
    extra += ["--client-config", str(config)] if config is not None else []
    proc = subprocess.run(
        [sys.executable, "-m", "laneway.ops.cli", *args, *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    ran = Ran(proc.returncode, proc.stdout, proc.stderr)
    assert_no_password(f"{ran.stdout}\n{ran.stderr}", broker.passwords, what=" ".join(args))
    return ran


def ok(ran: Ran) -> Ran:
    assert ran.code == 0, ran
    assert "Traceback" not in ran.stderr, ran.stderr
    return ran


def produce_keyed(conf: dict[str, str], topic: str, n: int, keys: int) -> dict[bytes, list[int]]:
    """``n`` records over ``keys`` keys, value = sequence number; each key's numbers in order."""
    producer = Producer({**conf, "linger.ms": 5, "enable.idempotence": True})
    order: dict[bytes, list[int]] = {}
    errors: list[KafkaError] = []
    for i in range(n):
        key = f"k{i % keys}".encode()
        order.setdefault(key, []).append(i)
        producer.produce(
            topic, key=key, value=str(i).encode(), on_delivery=lambda e, _m: e and errors.append(e)
        )
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors, errors[:3]
    return order


def produce_one(conf: dict[str, str], topic: str) -> KafkaError | None:
    """Produce one record; the delivery error, or None when the broker took it."""
    producer = Producer({**conf, "message.timeout.ms": 10_000})
    result: list[KafkaError | None] = []
    producer.produce(topic, b"v", key=b"k", on_delivery=lambda e, _m: result.append(e))
    producer.flush(20)
    assert len(result) == 1, "no delivery report within 20 s"
    return result[0]


def read(
    conf: dict[str, str],
    topic: str,
    n: int,
    *,
    group: str,
    isolation: str = "read_uncommitted",
    linger: float = 1.0,
) -> list[Message]:
    """Read ``topic`` from the start until ``n`` records and ``linger`` seconds more (a surplus
    shows as more than ``n``); gives up after 30 s."""
    consumer = Consumer(
        {
            **conf,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            if len(got) >= n:
                deadline = min(deadline, time.monotonic() + linger)
            for msg in consumer.consume(500, timeout=0.2):
                err = msg.error()
                if err is None:
                    got.append(msg)
                elif not err.retriable() and err.code() != KafkaError._PARTITION_EOF:
                    raise AssertionError(f"reading {topic}: {err}")
    finally:
        consumer.close()
    return got


def commit_offsets(conf: dict[str, str], group: str, offsets: list[TopicPartition]) -> None:
    """Commit ``offsets`` for ``group`` from outside it (no member joins): a group with committed
    offsets, for a test's set-up."""
    consumer = Consumer({**conf, "group.id": group})
    try:
        when_coordinator_ready(lambda: list(consumer.commit(offsets=offsets, asynchronous=False) or []))
    finally:
        consumer.close()


def committed(conf: dict[str, str], group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({**conf, "group.id": group})
    try:
        asked = [TopicPartition(topic, p) for p in range(partitions)]
        tps = when_coordinator_ready(lambda: consumer.committed(asked, timeout=10))
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def end_offsets(conf: dict[str, str], topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({**conf, "group.id": f"app-probe-{uuid.uuid4().hex[:6]}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def run_in_background(app: App, wait: float) -> tuple[threading.Thread, list[BaseException | None]]:
    """Start running ``app`` for at most ``wait`` seconds on a thread; the thread, and a list
    that gets the exception its start or run raised (None when it ran that long)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            app.run_until(lambda: False, timeout=wait)
        except BaseException as exc:  # the outcome under test
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, name="app-run", daemon=True)
    thread.start()
    return thread, outcome


def failure_within(app: App, wait: float) -> BaseException | None:
    """Run ``app`` for at most ``wait`` seconds; the exception its start or run raised, or None
    when it ran that long without failing. The test fails when the app does not stop within
    10 s more (its shutdown).
    """
    thread, outcome = run_in_background(app, wait)
    thread.join(wait + 10)
    if thread.is_alive():
        app.stop()
        raise AssertionError(f"the app neither failed nor stopped within {wait + 10:.0f}s (a hang)")
    return outcome[0]


def assert_no_password(text: str, passwords: Mapping[str, str], *, what: str = "the output") -> None:
    """Fail naming the user when one of ``passwords`` (user -> password) appears in ``text``."""
    leaked = sorted(user for user, password in passwords.items() if password in text)
    assert not leaked, f"{what}: the password of {', '.join(leaked)} leaked"


def wait_until(done: Callable[[], Any], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return True
        time.sleep(0.1)
    return bool(done())
