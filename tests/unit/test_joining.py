"""A restart after ``kill -9`` (or a second Ctrl-C) waits for the old consumers' session to time
out before the group assigns anything: the app logged "<app> started", then nothing for ~40 s.
Now it says, 5 s after the start and every 15 s after, that it waits for the group, and why."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from laneway import App
from laneway.monitor.joining import JoinWatch, who_holds
from laneway.monitor.metrics import PrometheusMetrics
from laneway.monitor.status import StatusBoard


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _watch(clock: Clock, assigns: list[int], stopping: threading.Event | None = None) -> JoinWatch:
    stop = stopping or threading.Event()
    watch = JoinWatch(
        name="orders",
        group="orders-g",
        holds=who_holds({"session.timeout.ms": 30000}),
        assigns=lambda: assigns[0],
        stopping=stop.is_set,
        clock=clock,
    )
    watch.start()
    return watch


def test_it_says_it_waits_for_the_group_after_5s_then_every_15s() -> None:
    clock, assigns = Clock(), [0]
    watch = _watch(clock, assigns)
    lines = []
    for _ in range(400):  # 40 s in steps of 0.1 s, as often as the status thread would look
        clock.now += 0.1
        if (line := watch.due()) is not None:
            lines.append((round(clock.now - 100.0), line))
    assert [at for at, _ in lines] == [5, 20, 35]
    first = lines[0][1]
    assert "orders: no partitions assigned yet, 5s after joining group 'orders-g'" in first
    assert "did not leave cleanly" in first and "kill -9" in first
    assert "session.timeout.ms (30000 ms)" in first


def test_an_assignment_ends_the_wait_an_empty_one_too() -> None:
    clock, assigns = Clock(), [0]
    watch = _watch(clock, assigns)
    clock.now += 3.0
    assert watch.due() is None
    assigns[0] = 1  # rebalance("assign", 0): past the partition count is no wait
    for _ in range(100):
        clock.now += 1.0
        assert watch.due() is None


def test_no_line_while_the_app_stops_nor_before_the_start() -> None:
    clock, stopping = Clock(), threading.Event()
    unstarted = JoinWatch(name="a", group="g", holds="x", assigns=lambda: 0, clock=clock)
    clock.now += 60.0
    assert unstarted.due() is None
    watch = _watch(clock, [0], stopping)
    stopping.set()
    clock.now += 60.0
    assert watch.due() is None


def test_it_names_the_session_timeout_it_waits_for() -> None:
    assert who_holds({"session.timeout.ms": "12000"}) == "its session.timeout.ms (12000 ms)"
    assert who_holds({}) == "its session.timeout.ms (10000 ms, Laneway's default)"
    # a heartbeat of the app's own keeps Laneway's session; one too slow for it leaves librdkafka's
    assert who_holds({"heartbeat.interval.ms": 1000}) == who_holds({})
    assert who_holds({"heartbeat.interval.ms": 12000}) == "its session.timeout.ms (librdkafka's 45000 ms)"
    assert "group.consumer.session.timeout.ms" in who_holds({"group.protocol": "consumer"})


def test_the_apps_watch_counts_the_consumers_assign_callbacks() -> None:
    app = App("orders", bootstrap_servers="127.0.0.1:9092", kafka_config={"session.timeout.ms": 20000})
    stopping = threading.Event()
    watch = JoinWatch.of(app.settings, app.metrics, stopping)
    assert watch._assigns() == 0
    app.metrics.rebalance("assign", 0)
    assert watch._assigns() == 1
    assert watch._holds == "its session.timeout.ms (20000 ms)"
    assert not watch._stopping()
    stopping.set()
    assert watch._stopping()


def test_the_status_boards_watch_thread_logs_the_line(caplog: pytest.LogCaptureFixture) -> None:
    metrics = PrometheusMetrics()
    board = StatusBoard(
        name="orders",
        group="g",
        metrics=metrics,
        processor=lambda: None,
        paused=dict,
        caps=(1000, 1 << 20),
        stall=0.2,  # the thread looks every 0.05 s
    )
    joins = JoinWatch(name="orders", group="g", holds="x", assigns=lambda: 0, first=0.0, every=3600.0)
    with caplog.at_level(logging.INFO, logger="laneway.app"):
        board.start(joins)
        time.sleep(0.2)  # the board looks four times: the consumers have not started, no line
        assert not any("no partitions assigned yet" in r.getMessage() for r in caplog.records)
        joins.start()  # the consumers started
        try:
            for _ in range(200):
                if any("no partitions assigned yet" in r.getMessage() for r in caplog.records):
                    break
                time.sleep(0.05)
        finally:
            board.stop()
    lines = [r for r in caplog.records if "no partitions assigned yet" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
