"""The repeat filter on librdkafka's log lines: a 10 s outage's 200 connection failures become
two lines, the second saying how many it stands for; other lines pass untouched."""

from __future__ import annotations

import logging

import pytest

from laneway.kafka.logs import RepeatFilter, librdkafka_logger


def _record(
    message: str, level: int = logging.ERROR, name: str = "laneway.kafka.client.consumer"
) -> logging.LogRecord:
    return logging.LogRecord(
        name, level, __file__, 1, "%s [%s] %s", ("FAIL", "app#consumer-1", message), None
    )


def test_a_flood_of_alike_lines_becomes_one_per_window_with_the_count() -> None:
    now = [0.0]
    f = RepeatFilter(every=10.0, clock=lambda: now[0])
    passed = []
    for i in range(400):  # every 50 ms for 20 s, the timings changing
        now[0] = i * 0.05
        r = _record(f"127.0.0.1:57277/bootstrap: Connect failed (after {i % 7}ms in state CONNECT)")
        if f.filter(r):
            passed.append((now[0], r.getMessage()))
    assert [t for t, _ in passed] == [0.0, 10.0]
    assert passed[0][1].endswith("in state CONNECT)")
    assert passed[1][1].endswith("(and 199 more like it in the last 10 s)")


def test_other_lines_levels_and_loggers_pass() -> None:
    now = [0.0]
    f = RepeatFilter(every=10.0, clock=lambda: now[0])
    assert f.filter(_record("Connect to 127.0.0.1:1 failed (after 0ms)"))
    assert not f.filter(_record("Connect to 127.0.0.1:1 failed (after 3ms)"))
    assert f.filter(_record("Connect to 127.0.0.1:2 failed (after 0ms)"))  # another broker
    assert f.filter(_record("Disconnected: connection closed by peer"))  # another kind
    assert f.filter(_record("Connect to 127.0.0.1:1 failed (after 0ms)", level=logging.WARNING))
    assert f.filter(_record("Connect to 127.0.0.1:1 failed (after 0ms)", name="laneway.kafka.client.dlq"))
    now[0] = 10.0
    again = _record("Connect to 127.0.0.1:1 failed (after 1ms)")
    assert f.filter(again) and again.getMessage().endswith("(and 1 more like it in the last 10 s)")


def test_the_filter_forgets_kinds_past_its_bound() -> None:
    f = RepeatFilter(every=10.0, clock=lambda: 0.0)
    for i in range(RepeatFilter.MAX_KINDS + 5):
        word = "".join(chr(97 + int(d)) for d in str(i))  # a new kind each time: no digits
        assert f.filter(_record(f"line {word}"))
    assert len(f._kinds) <= RepeatFilter.MAX_KINDS


def test_each_client_logger_gets_one_filter() -> None:
    a = librdkafka_logger("laneway.kafka.test-logs")
    b = librdkafka_logger("laneway.kafka.test-logs")
    assert a is b and sum(isinstance(f, RepeatFilter) for f in a.filters) == 1


def test_the_clients_laneway_builds_log_through_the_filter() -> None:
    import laneway.kafka.admin
    import laneway.kafka.dlq
    import laneway.kafka.producer
    import laneway.kafka.source  # noqa: F401

    for name in ("client.consumer", "client.producer", "client.dlq", "librdkafka"):
        logger = logging.getLogger(f"laneway.kafka.{name}")
        assert any(isinstance(f, RepeatFilter) for f in logger.filters), name
    # never on a module's own logger: its lines (a callback's traceback ...) are not held back
    for module in ("source", "producer", "dlq", "admin"):
        logger = logging.getLogger(f"laneway.kafka.{module}")
        assert not any(isinstance(f, RepeatFilter) for f in logger.filters), module


def test_a_record_that_cannot_be_formatted_passes_to_its_handler() -> None:
    bad = logging.LogRecord("x", logging.ERROR, __file__, 1, "%d", ("not a number",), None)
    assert RepeatFilter().filter(bad)


_LOADING = (
    "[thrd:main]: Failed to acquire idempotence PID from broker 127.0.0.1:48623/1: "
    "Broker: Coordinator load in progress: retrying"
)


def _through(logger: logging.Logger, record: logging.LogRecord) -> list[logging.LogRecord]:
    """What ``logger``'s handlers get of ``record`` (``Logger.handle``: its filters, then its handlers)."""
    got: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, r: logging.LogRecord) -> None:
            got.append(r)

    handler = Keep()
    logger.addHandler(handler)
    try:
        logger.handle(record)
    finally:
        logger.removeHandler(handler)
    return got


def test_a_coordinator_still_loading_is_an_info_line_saying_it_passes() -> None:
    """A fresh broker's "Coordinator load in progress" (librdkafka retries) was a WARNING at every
    first start of an app: it is INFO, said to be transient."""
    logger = librdkafka_logger("laneway.kafka.client.test-loading")
    logger.setLevel(logging.INFO)
    got = _through(logger, _record(_LOADING, level=logging.WARNING, name=logger.name))
    assert [(r.levelno, r.levelname) for r in got] == [(logging.INFO, "INFO")]
    assert "load in progress: retrying (transient: a broker that just started is" in got[0].getMessage()


def test_a_coordinator_still_loading_is_not_logged_where_info_is_off() -> None:
    logger = librdkafka_logger("laneway.kafka.client.test-loading-quiet")
    logger.setLevel(logging.WARNING)
    assert _through(logger, _record(_LOADING, level=logging.WARNING, name=logger.name)) == []


def test_other_warnings_stay_warnings() -> None:
    logger = librdkafka_logger("laneway.kafka.client.test-loading-other")
    logger.setLevel(logging.INFO)
    line = "[thrd:main]: Failed to acquire idempotence PID from broker: Broker: Cluster authorization failed"
    got = _through(logger, _record(line, level=logging.WARNING, name=logger.name))
    assert [r.levelno for r in got] == [logging.WARNING] and got[0].getMessage().endswith("failed")


_FENCED_LINES = [
    "[thrd:main]: Fatal error: Broker: Producer attempted an operation with an old epoch: "
    "Producer fenced by newer instance",
    "[thrd:txn]: TXNERR: Failed to end transaction: Broker: There is a newer producer with the "
    "same transactionalId which fences the current one",
    # a transaction timeout the broker refused: the app's start says so in one line, a redrive
    # asks for less (tests/integration/test_redrive_transaction_limit.py)
    "[thrd:main]: Fatal transaction error: Failed to acquire transactional PID from broker "
    "TxnCoordinator/1: Broker: Transaction timeout is larger than the maximum value allowed by "
    "the broker's max.transaction.timeout.ms (INVALID_TRANSACTION_TIMEOUT)",
]


@pytest.mark.parametrize("line", _FENCED_LINES)
def test_a_fenced_transactional_producer_s_lines_are_info(line: str) -> None:
    """A redrive another run took over logged librdkafka's TXNERR and FATAL lines as errors, above
    the one line its caller gives: they are INFO."""
    logger = librdkafka_logger("laneway.kafka.client.test-fenced")
    logger.setLevel(logging.INFO)
    got = _through(logger, _record(line, level=logging.ERROR, name=logger.name))
    assert [(r.levelno, r.levelname) for r in got] == [(logging.INFO, "INFO")]
    assert got[0].getMessage().endswith(line)


def test_a_fenced_line_is_not_logged_where_info_is_off() -> None:
    logger = librdkafka_logger("laneway.kafka.client.test-fenced-quiet")
    logger.setLevel(logging.WARNING)
    assert _through(logger, _record(_FENCED_LINES[0], level=logging.ERROR, name=logger.name)) == []


def test_other_errors_stay_errors() -> None:
    logger = librdkafka_logger("laneway.kafka.client.test-fenced-other")
    logger.setLevel(logging.INFO)
    line = "[thrd:main]: Fatal error: Broker: Transactional Id authorization failed"
    got = _through(logger, _record(line, level=logging.ERROR, name=logger.name))
    assert [r.levelno for r in got] == [logging.ERROR]
