"""Rebalance storm: workers join and leave every few seconds while records flow.

All workers append to one file (one ``write`` per line on ``O_APPEND``), so its order is
the order events finished across processes; a partition moves only after its old owner's
revoke has finished or dropped its work, so per-key order can be checked on that file.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

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
    wait_exit,
    wait_for,
)

STORM_SECONDS = pick(12, 150)
MAX_EVENTS = 500
MAX_WORKERS = 3
PARTITIONS = 8


def test_workers_joining_and_leaving_lose_nothing_and_nobody_stalls(
    kafka_bootstrap: str,
    stream_topic: StreamTopic,
    group_id: str,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    seed = int(os.environ.get("LANEWAY_CHAOS_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    topic = stream_topic(PARTITIONS)
    out = tmp_path / "finished.txt"
    producer = StreamProducer(kafka_bootstrap, topic, keys=300, rate=400, backlog=1000, seed=seed).start()

    def join() -> subprocess.Popen[bytes]:
        w = spawn_worker(
            kafka_bootstrap,
            topic,
            group_id,
            out,
            tmp_path / "workers.log",
            sleep_ms=10,
            max_events=MAX_EVENTS,
        )
        procs.append(w)
        return w

    members = [join(), join()]
    leaving: list[subprocess.Popen[bytes]] = []
    wait_for(lambda: len(read_lines(out)) > 0, 90, "the first workers to start processing")
    joins = leaves = 0
    storm_end = time.monotonic() + STORM_SECONDS
    while time.monotonic() < storm_end:
        time.sleep(rng.uniform(1.5, 4.0))
        members = [w for w in members if w.poll() is None]
        if len(members) <= 1 or (len(members) < MAX_WORKERS and rng.random() < 0.5):
            members.append(join())
            joins += 1
        else:
            victim = members.pop(rng.randrange(len(members)))
            victim.send_signal(signal.SIGTERM)  # a graceful leave, mid-stream
            leaving.append(victim)
            leaves += 1
    if len({ln.pid for ln in read_lines(out)}) < 3:
        # every newcomer may have left before its first assignment (a slow start, then a
        # random SIGTERM): one more joins and must get partitions, so work moves for sure
        members.append(join())
        joins += 1
        wait_for(lambda: len({ln.pid for ln in read_lines(out)}) >= 3, 90, "a newcomer to get partitions")
    produced = producer.stop()
    ends = end_offsets(kafka_bootstrap, topic, PARTITIONS)
    try:
        settle = wait_for(
            lambda: committed(kafka_bootstrap, group_id, topic, PARTITIONS) == ends,
            90,
            "lag zero after the storm",
        )
    except AssertionError:
        for w in members:  # leave every thread's stack in workers.log for the report
            w.send_signal(signal.SIGUSR1)
        time.sleep(1)
        got = committed(kafka_bootstrap, group_id, topic, PARTITIONS)
        raise AssertionError(f"a worker stalled: committed {got}, end offsets {ends}") from None
    left_codes = [wait_exit(w, 60) for w in leaving]
    final_codes = [terminate(w) for w in members]
    log = (tmp_path / "workers.log").read_text(errors="replace")
    for w, code in zip(leaving, left_codes, strict=True):
        # SIGTERM while still importing (before the app started and joined) kills at once: nothing to drain
        early = code == -signal.SIGTERM and f"chaos-{w.pid} started" not in log
        assert code == 0 or early, f"worker {w.pid} leaving during the storm exited with {code}"
    for w, code in zip(members, final_codes, strict=True):
        early = code == -signal.SIGTERM and f"chaos-{w.pid} started" not in log  # joined at the very end
        assert code == 0 or early, f"worker {w.pid} still in the group at the end exited with {code}"

    lines = read_lines(out)
    tally = check_stream(produced, lines)
    changes = joins + leaves
    print(f"seed={seed} joins={joins} leaves={leaves} lag_zero_after={settle:.1f}s {tally}")
    assert changes >= STORM_SECONDS / 4 - 1
    assert tally.produced == sum(ends.values())
    # a membership change replays at most what the members held uncommitted: their in-memory caps
    assert tally.duplicates <= changes * MAX_WORKERS * MAX_EVENTS
    assert len({ln.pid for ln in lines}) >= 3  # work really moved between processes
