"""Fair intake against the real broker: backlogs on four partitions advance together.

The client hands records over a partition at a time. Without a fair share of the event cap,
one partition's records filled it and the others waited for it to drain: in partition mode
one to three of the four partition lanes ran. Counted, not timed: the processed count of each
partition is sampled every 100 ms, and in most samples all four moved.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time

import pytest
from confluent_kafka import Producer

from laneway import App, Backpressure, Event
from tests.conftest import TopicFactory
from tests.integration.helpers import committed, end_offsets

PARTITIONS = 4
PER_PARTITION = 3_000


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            producer.produce(topic, key=f"k{i % 50}".encode(), value=b"x" * 100, partition=p)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def test_backlogs_on_four_partitions_keep_four_partition_lanes_busy(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    topic = make_topic(partitions=PARTITIONS)
    _produce(kafka_bootstrap, topic)
    counts = [0] * PARTITIONS
    lock = threading.Lock()
    app = App(
        "fair-intake",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        concurrency=16,
        backpressure=Backpressure(max_events=2_000),
    )

    @app.handler(topic, ordering="partition", on_failure="halt")
    def handle(ev: Event) -> None:
        time.sleep(0.001)
        with lock:
            counts[ev.partition] += 1

    samples: list[tuple[int, ...]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            with lock:
                samples.append(tuple(counts))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        assert app.run_until(lambda: sum(counts) >= PARTITIONS * PER_PARTITION, timeout=120)
    finally:
        stop.set()
        sampler.join()

    assert counts == [PER_PARTITION] * PARTITIONS
    # the 100 ms steps from the first record processed until one partition is done: every
    # partition had records waiting all along, so each should move in every step
    steps = [(a, b) for a, b in itertools.pairwise(samples) if sum(a) > 0 and max(a) < PER_PARTITION]
    assert len(steps) >= 10, samples
    all_moved = sum(all(y > x for x, y in zip(a, b, strict=True)) for a, b in steps)
    assert all_moved >= 0.8 * len(steps), (all_moved, len(steps), samples)
    assert committed(kafka_bootstrap, group_id, topic, PARTITIONS) == end_offsets(
        kafka_bootstrap, topic, PARTITIONS
    )


def test_a_partition_paused_for_a_hot_key_resumes_once_the_key_cools(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A key over the key cap pauses its partition; once the key's lane drained, the partition
    came back only if another partition shared the cap with it: in key mode it stayed paused
    for good, its later records never fetched (seen with `laneway top`: paused, lag 1,077,
    nothing in memory). Counted: every record is handled, per partition.

    The pause is said: a line naming the key when the partition pauses and when the key is
    down again, and ``/status`` gives the partition's reason (a review: a partition paused for
    its key had no word in the log and no reason in ``/status``)."""
    caplog.set_level(logging.INFO, logger="laneway.kafka.source")
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    produced = [0, 0]
    for i in range(4_000):
        key = b"hot" if i % 2 == 0 else f"k{i % 200}".encode()
        producer.produce(topic, key=key, value=b"x", partition=0 if key == b"hot" else 1)
        produced[0 if key == b"hot" else 1] += 1
    assert producer.flush(30) == 0
    counts = [0, 0]
    lock = threading.Lock()
    app = App(
        "hot-cools",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        concurrency=16,
        backpressure=Backpressure(max_key_share=0.02),  # a key over 200 events pauses its partition
    )

    @app.handler(topic, on_failure="halt")
    def handle(ev: Event) -> None:
        time.sleep(0.0005)
        with lock:
            counts[ev.partition] += 1

    reasons: list[object] = []

    def done() -> bool:
        reasons.extend(p["paused_for"] for p in app.status.partitions() if p["partition"] == 0)
        return counts == produced

    app.run_until(done, timeout=60)
    assert counts == produced
    assert committed(kafka_bootstrap, group_id, topic, 2) == end_offsets(kafka_bootstrap, topic, 2)
    assert "hot_key" in reasons, set(reasons)
    lines = [r.getMessage() for r in caplog.records if r.name == "laneway.kafka.source"]
    paused = [line for line in lines if line.startswith(f"paused {topic}[0]: key 'hot' holds ")]
    assert paused and "over its cap of 200 (max_key_share=0.02 of max_events)" in paused[0], lines
    assert any(line.startswith(f"{topic}[0] no longer waits for key 'hot'") for line in lines), lines
    assert not any(f"{topic}[1]" in line for line in lines if "key '" in line)  # the cold keys: no line


def test_a_key_ordered_partitions_backlog_does_not_starve_the_others_for_long(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Key mode, a slow handler, a small cap: the client hands out the first partition's
    prefetched records first, and with no shares they filled the cap until they ran out, the
    other partitions' records waiting behind them (a review saw two of four partitions get
    nothing for 45 s). A partition starved past ``STARVE_AFTER`` (here 2 s, looked at every 0.5 s;
    the first partition takes records at every look meanwhile) puts the topic
    under the shares: every partition has records processed well before the first one's
    backlog of 3,000 is through. Counted: the records processed when the last partition's
    first one ran."""
    from laneway.kafka import starving

    monkeypatch.setattr(starving, "STARVE_AFTER", 2.0)
    monkeypatch.setattr(starving, "EVERY", 0.5)
    topic = make_topic(partitions=PARTITIONS)
    _produce(kafka_bootstrap, topic)
    counts = [0] * PARTITIONS
    lock = threading.Lock()
    app = App(
        "fair-keys",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        concurrency=8,
        backpressure=Backpressure(max_events=200),
    )

    @app.handler(topic, on_failure="halt")  # ordering="key", 50 keys per partition
    def handle(ev: Event) -> None:
        time.sleep(0.01)
        with lock:
            counts[ev.partition] += 1

    def every_partition_ran() -> bool:
        with lock:
            return all(counts) or sum(counts) >= PER_PARTITION

    assert app.run_until(every_partition_ran, timeout=120)
    with lock:
        seen = list(counts)
    assert all(seen), seen  # no partition waited for another's backlog to run out
    assert sum(seen) < PER_PARTITION, seen


def test_key_ordered_partitions_taking_turns_in_a_round_keep_no_shares(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fast handler's backlog of small records on 12 partitions: a partition's fetch holds
    thousands of them, so the partitions take the cap in turns and each waits seconds for its
    next one while the others take theirs. That wait is a turn in a round: the topic never goes
    under the shares (a review: their pauses cut a 5 ms I/O backlog from 46,000 records/s to
    27,000). Counted: the watch's verdicts (none) and the records processed per offset (each
    once). ``STARVE_AFTER`` is 2 s here, looked at every 0.25 s; the code before gave a verdict
    within 3 s."""
    from laneway.kafka import starving

    monkeypatch.setattr(starving, "STARVE_AFTER", 2.0)
    monkeypatch.setattr(starving, "EVERY", 0.25)
    verdicts: list[frozenset[str]] = []
    look = starving.StarvationWatch.look

    def counted(self: starving.StarvationWatch, now: float, **kwargs: object) -> frozenset[str]:
        fair = look(self, now, **kwargs)  # type: ignore[arg-type]
        if fair:
            verdicts.append(fair)
        return fair

    monkeypatch.setattr(starving.StarvationWatch, "look", counted)
    partitions, per = 12, 15_000
    topic = make_topic(partitions=partitions)
    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,  # the whole backlog fits the client's queue
        }
    )
    for i in range(per):
        for p in range(partitions):
            producer.produce(topic, key=b"k%d" % (i % 500), value=b"x" * 32, partition=p)
        if i % 200 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    seen = [bytearray(per) for _ in range(partitions)]
    done = itertools.count(1)
    app = App("fair-rounds", bootstrap_servers=kafka_bootstrap, group_id=group_id, concurrency=256)

    @app.handler(topic, on_failure="halt")  # ordering="key", 500 keys per partition
    async def handle(ev: Event) -> None:
        await asyncio.sleep(0.005)
        seen[ev.partition][ev.offset] += 1
        next(done)

    assert app.run_until(lambda: all(arr.count(1) == per for arr in seen), timeout=180)
    assert [arr.count(1) for arr in seen] == [per] * partitions  # each record once
    assert verdicts == []  # no partition starved: the cap went round


def test_a_hot_key_holds_at_most_its_cap_and_one_fetch_and_the_others_flow(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """A fetch took up to a batch of 500 records, all of one key when its partition holds one
    key: a key capped at 100 events held 713, then all 1,000 of the event cap, and every other
    partition paused for memory (a review). A fetch now takes at most a key's cap, so the key
    holds at most twice its cap, and the other partition's records all run while it is stuck.
    Counted: the events held, sampled every 10 ms (the hot key's, and the cold records in flight
    beside them: at most a fetch of 100), and the others' records."""
    topic = make_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20})
    for i in range(2_000):
        producer.produce(topic, key=b"hot", value=b"x", partition=0)
        producer.produce(topic, key=f"k{i % 300}".encode(), value=b"x", partition=1)
    assert producer.flush(30) == 0
    gate = threading.Event()
    counts = [0, 0]
    lock = threading.Lock()
    app = App(
        "hot-capped",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        concurrency=8,
        backpressure=Backpressure(max_events=1_000, max_key_share=0.1),  # the key's cap: 100 events
    )

    @app.handler(topic, on_failure="halt")
    def handle(ev: Event) -> None:
        if ev.key == b"hot":
            gate.wait(30)
        with lock:
            counts[ev.partition] += 1

    most = [0]  # events held: the hot key's, and the cold ones in flight meanwhile
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.01):
            if app.processor is not None:
                most[0] = max(most[0], app.processor.events_in_memory)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    began = time.monotonic()

    def done() -> bool:
        # the cold partition ran while the key was stuck, and the key took in its cap (or 5 s passed)
        held = most[0] >= 100 or time.monotonic() - began > 5
        if counts[1] == 2_000 and held and not gate.is_set():
            time.sleep(0.2)  # a last fetch past the cap, if one comes, is sampled
            stop.set()
            gate.set()
        return counts == [2_000, 2_000]

    try:
        assert app.run_until(done, timeout=60), counts
    finally:
        gate.set()
        stop.set()
        sampler.join()
    # at its cap, or past it by one fetch at most, and a fetch of cold records (the code before: 1,000)
    assert 100 <= most[0] <= 300, most[0]
