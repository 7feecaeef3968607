"""Crash: kill -9 a worker at random points mid-stream, restart it, repeat; then count.

Every produced offset is processed at least once, each key's completions are its produce
order up to replayed suffixes (see tests/chaos/support.py), and every duplicate is accounted
for: it is a record the killed process had finished but not yet committed (neither below the
committed position nor named finished in the commit's metadata).
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

from tests.chaos.conftest import StreamTopic
from tests.chaos.support import (
    StreamProducer,
    check_stream,
    committed,
    committed_finished,
    end_offsets,
    kill9,
    pick,
    read_lines,
    redone_at_kill,
    spawn_worker,
    terminate,
    wait_for,
)

KILLS = int(pick(2, 20))
MAX_EVENTS = 500
PARTITIONS = 6
CONCURRENCY = 16
SLEEP_MS = 20


def test_kill9_at_random_points_loses_nothing(
    kafka_bootstrap: str,
    stream_topic: StreamTopic,
    group_id: str,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    seed = int(os.environ.get("LANEWAY_CHAOS_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    print(f"seed={seed} kills={KILLS}")
    topic = stream_topic(PARTITIONS)
    producer = StreamProducer(
        kafka_bootstrap, topic, keys=200, rate=300, backlog=int(pick(1000, 3000)), seed=seed
    ).start()

    def spawn(out: Path) -> subprocess.Popen[bytes]:
        w = spawn_worker(
            kafka_bootstrap,
            topic,
            group_id,
            out,
            tmp_path / "workers.log",
            sleep_ms=SLEEP_MS,
            max_events=MAX_EVENTS,
            concurrency=CONCURRENCY,
        )
        procs.append(w)
        return w

    runs: list[Path] = []
    finished_uncommitted: list[int] = []  # per kill: what the killed run had done past the commit
    for k in range(KILLS):
        out = tmp_path / f"run-{k:02d}.txt"
        runs.append(out)
        w = spawn(out)
        wait_for(lambda out=out: len(read_lines(out)) > 0, 90, f"run {k} to start processing")
        time.sleep(rng.uniform(0.05, 2.5))
        assert w.poll() is None, f"run {k} exited by itself with {w.returncode}"
        kill9(w)
        time.sleep(0.5)  # let a commit already on the wire land before reading the truth
        got = committed_finished(kafka_bootstrap, group_id, topic, PARTITIONS)
        assert got, "could not read the committed offsets"
        done = read_lines(out)
        past = redone_at_kill(done, got)
        finished_uncommitted.append(past)
        print(f"kill {k}: run finished {len(done)}, {past} of them past the committed offsets")

    produced = producer.stop()
    out = tmp_path / "run-final.txt"
    runs.append(out)
    w = spawn(out)
    ends = end_offsets(kafka_bootstrap, topic, PARTITIONS)
    took = wait_for(
        lambda: committed(kafka_bootstrap, group_id, topic, PARTITIONS) == ends,
        180,
        "the final run to catch up",
    )
    assert terminate(w) == 0

    lines = [ln for run in runs for ln in read_lines(run)]  # runs never overlap: file order is time order
    tally = check_stream(produced, lines)
    print(f"{tally} final_catch_up={took:.1f}s per_kill_replays={finished_uncommitted}")
    assert tally.produced == sum(ends.values())
    # every duplicate is a record a killed run finished past its last commit, and nothing else
    assert tally.duplicates == sum(finished_uncommitted)
    # What a kill can cost is bounded: the records in memory, plus what finished above a partition's
    # commit position while its oldest unfinished record waited (behind its key's lane, then for the
    # next 0.2 s commit). At 16 handler calls of 20 ms at once, at most 800 records finish a second;
    # allow one second of them. (It was 2 x the cap, 1,000: on a quiet machine the code before and
    # after the commit rule's change for transaction markers both exceeded it, 1,018 and 1,057 with
    # seed 26485, each with no loss and every duplicate accounted for.)
    assert max(finished_uncommitted) <= MAX_EVENTS + CONCURRENCY * 1000 // SLEEP_MS
