"""Emitted records the client refuses before the broker sees them, against the real broker: a
value ``emit`` cannot produce is the handler's failure (dead-lettered), a record over the
client's own size limit halts the app naming the topic, and no commit passes it."""

from __future__ import annotations

import pytest

from laneway import App, Event, ExactlyOnce, Retry
from laneway.kafka import headers as h
from tests.conftest import TopicFactory
from tests.integration.helpers import committed, produce_keyed, read_all


def test_a_handler_emitting_a_dict_is_dead_lettered_and_the_app_goes_on(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """``event.emit("out", event.payload)`` under ``deserializer="json"``: the TypeError is the
    handler's (retried, then dead-lettered); the other records' outputs are produced and every
    offset is committed. It used to halt the app at the next commit, and again on each restart."""
    source = make_topic(partitions=1)
    output = make_topic(partitions=1, prefix="out")
    dlq = make_topic(partitions=1, prefix="dlq")
    produce_keyed(kafka_bootstrap, source, 3, keys=3)  # values 0, 1, 2: JSON numbers
    calls: list[tuple[int, int]] = []
    app = App("emit-dict", bootstrap_servers=kafka_bootstrap, group_id=group_id)

    @app.handler(
        source, dead_letter_topic=dlq, deserializer="json", retry=Retry(max_attempts=2, initial_backoff=0.01)
    )
    def handle(ev: Event) -> None:
        calls.append((ev.offset, ev.attempt))
        ev.emit(output, {"n": ev.payload} if ev.offset == 1 else ev.value, key=ev.key)

    assert app.run_until(lambda: committed(kafka_bootstrap, group_id, source, 1)[0] == 3, 60)
    assert sorted(calls) == [(0, 1), (1, 1), (1, 2), (2, 1)]
    (letter,) = read_all(kafka_bootstrap, dlq, 1)
    why = h.decode(letter.headers())  # type: ignore[attr-defined]
    assert why[h.ORIGINAL_OFFSET] == "1" and why[h.ERROR_TYPE].endswith("TypeError")
    assert "value must be bytes, str or None, not dict" in why[h.ERROR_MESSAGE]
    assert sorted(m.value() for m in read_all(kafka_bootstrap, output, 2)) == [b"0", b"2"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("exactly_once", [None, ExactlyOnce()], ids=["at-least-once", "exactly-once"])
def test_an_output_over_the_clients_size_limit_halts_the_app_naming_the_topic(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, exactly_once: ExactlyOnce | None
) -> None:
    """A record over librdkafka's ``message.max.bytes`` (1,000,000) to a topic that takes it: the
    client refuses it in ``produce()`` itself. The app halts with an OutputError naming the topic
    and the reason, as for a record over the topic's own limit, and nothing is committed past it.
    It used to raise the client's KafkaException, unwrapped."""
    from laneway.kafka.commit import OutputError

    source = make_topic(partitions=1)
    output = make_topic(partitions=1, prefix="out", config={"max.message.bytes": "2000000"})
    dlq = make_topic(partitions=1, prefix="dlq")
    produce_keyed(kafka_bootstrap, source, 3, keys=3)
    app = App("too-large", bootstrap_servers=kafka_bootstrap, group_id=group_id, exactly_once=exactly_once)

    @app.handler(source, dead_letter_topic=dlq)
    def handle(ev: Event) -> None:
        ev.emit(output, b"x" * (1_000_100 if ev.offset == 1 else 10), key=ev.key)

    with pytest.raises(OutputError, match=f"to {output}: .*MSG_SIZE_TOO_LARGE"):
        app.run_until(lambda: False, timeout=60)
    assert committed(kafka_bootstrap, group_id, source, 1)[0] < 2


def test_outputs_waiting_behind_a_stuck_record_are_held_within_the_byte_cap(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """The outputs of finished records wait for the position to pass them; behind a stuck record
    they count in ``max_bytes``, so the consumer stops taking records once they fill it (a review
    saw a 100,000-record backlog fetched and finished, 190 MB of outputs held, with a 64 MiB cap).
    Released, every record's output is produced once."""
    import asyncio
    import threading
    import time

    from laneway import Backpressure

    source = make_topic(partitions=1)
    output = make_topic(partitions=1, prefix="out")
    dlq = make_topic(partitions=1, prefix="dlq")
    n, cap = 20_000, 4 * 1024 * 1024
    produce_keyed(kafka_bootstrap, source, n, keys=100)
    release = threading.Event()
    done: list[int] = []
    app = App(
        "emit-held",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        concurrency=64,
        backpressure=Backpressure(max_events=2_000, max_bytes=cap),
    )

    @app.handler(source, dead_letter_topic=dlq)
    async def handle(ev: Event) -> None:
        while ev.offset == 0 and not release.is_set():
            await asyncio.sleep(0.02)
        ev.emit(output, b"x" * 2000, key=ev.key)
        done.append(ev.offset)

    runner = threading.Thread(
        target=app.run_until, args=(lambda: committed(kafka_bootstrap, group_id, source, 1)[0] == n, 120)
    )
    runner.start()
    try:
        # until the count stands still for 2 s (a guard of 60 s against hanging, not a timed assert)
        last, still, deadline = -1, time.monotonic(), time.monotonic() + 60
        while time.monotonic() < deadline and (len(done) != last or time.monotonic() - still < 2):
            if len(done) != last:
                last, still = len(done), time.monotonic()
            time.sleep(0.1)
        held = len(done)
        assert app.processor is not None
        # a cap's worth of outputs, and those of the records already taken in (the event cap)
        assert 0 < held <= cap // 2000 + 2 * 2_000, held
        assert app.processor.bytes_in_memory <= cap + 2 * 2_000 * 2100, app.processor.bytes_in_memory
    finally:
        release.set()
        runner.join(150)
    assert not runner.is_alive()
    assert sorted(done) == list(range(n))
    outputs = read_all(kafka_bootstrap, output, n)
    assert len(outputs) == n
