"""Broker restart: stop the broker process mid-stream (SIGKILL, or SIGTERM in the long form),
start it again over the same data and port; the workers reconnect by themselves and finish."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

from laneway.ops.broker import LocalBroker
from tests.chaos.conftest import StreamTopic
from tests.chaos.support import (
    StreamProducer,
    check_stream,
    committed,
    end_offsets,
    pick,
    read_lines,
    spawn_worker,
    terminate,
    wait_for,
)

RESTARTS = int(pick(1, 4))
MAX_EVENTS = 500
PARTITIONS = 4


def _stop(broker: LocalBroker, hard: bool) -> None:
    if hard:
        broker.kill()
    else:
        broker.stop()  # SIGTERM: a controlled shutdown; the fixture's broker keeps its data dir


def test_workers_survive_broker_restarts(
    own_broker: LocalBroker,
    stream_topic: StreamTopic,
    group_id: str,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    seed = int(os.environ.get("LANEWAY_CHAOS_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    bootstrap = own_broker.bootstrap
    topic = stream_topic(PARTITIONS, bootstrap=bootstrap)
    out = tmp_path / "finished.txt"
    producer = StreamProducer(bootstrap, topic, keys=100, rate=200, backlog=500, seed=seed).start()
    workers = [
        spawn_worker(
            bootstrap, topic, group_id, out, tmp_path / "workers.log", sleep_ms=10, max_events=MAX_EVENTS
        )
        for _ in range(2)
    ]
    procs.extend(workers)
    wait_for(lambda: len(read_lines(out)) > 0, 90, "the workers to start processing")

    outages: list[str] = []
    for r in range(RESTARTS):
        time.sleep(rng.uniform(0.5, 2.0))
        hard = r % 2 == 0
        _stop(own_broker, hard)
        down = rng.uniform(3.0, 15.0) if r else 7.0  # the first outage outlives the 6 s session timeout
        time.sleep(down)
        own_broker.start()
        before = len(read_lines(out))
        resumed = wait_for(
            lambda before=before: len(read_lines(out)) > before, 120, f"progress after restart {r}"
        )
        # the next outage only once a commit has landed since this one: an outage replays what
        # finished since the last landed commit, and back-to-back outages (the next one within the
        # second after progress resumed, before any commit landed) replayed each window's whole
        # backlog again: 9,000-15,000 duplicates with seed 392408 (RELIABILITY.md, 10l)
        seen: list[dict[int, int]] = []  # {} while the coordinator is still loading the group
        wait_for(
            lambda seen=seen: bool(
                seen.append(committed(bootstrap, group_id, topic, PARTITIONS)) or seen[-1]
            ),
            60,
            "offsets",
        )
        landed = seen[-1]
        wait_for(
            lambda landed=landed: committed(bootstrap, group_id, topic, PARTITIONS) not in ({}, landed),
            60,
            f"a commit after restart {r}",
        )
        outages.append(
            f"{'kill -9' if hard else 'SIGTERM'} down {down:.1f}s, progress again {resumed:.1f}s later"
        )
        assert [w.poll() for w in workers] == [None, None], "a worker exited during the outage"

    produced = producer.stop()
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    try:
        settle = wait_for(lambda: committed(bootstrap, group_id, topic, PARTITIONS) == ends, 120, "lag zero")
    except AssertionError:
        for w in workers:  # every thread's stack into workers.log
            w.send_signal(signal.SIGUSR1)
        time.sleep(1)
        got = committed(bootstrap, group_id, topic, PARTITIONS)
        done = read_lines(out)
        last = {
            p: max((ln.offset for ln in done if ln.partition == p), default=-1) for p in range(PARTITIONS)
        }
        raise AssertionError(
            f"no lag zero 120 s after the stream ended: committed {got}, end offsets {ends}, "
            f"highest offset finished per partition {last}"
        ) from None
    assert [w.poll() for w in workers] == [None, None]  # the same processes, never restarted
    assert [terminate(w) for w in workers] == [0, 0]

    tally = check_stream(produced, read_lines(out))
    print(f"seed={seed} outages={outages} lag_zero_after={settle:.1f}s {tally}")
    assert tally.produced == sum(ends.values())
    # an outage replays at most what both workers held uncommitted
    assert tally.duplicates <= RESTARTS * 2 * 2 * MAX_EVENTS
