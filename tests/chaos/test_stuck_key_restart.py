"""A stuck key, then kill -9 (issue 22): the restart redoes what was unfinished, not the
partition's whole progress past the stuck key.

One key's handler blocks for 20 s on each of its records; its first record is its partition's
first, so it holds that partition's committed position at 0 while ~20,000 records of other keys
finish. The worker is killed with SIGKILL, and a new one finishes the topic. Run twice, with
the commit metadata on and off (``LANEWAY_COMMIT_METADATA=0``), in two groups on one topic.
Counted: the records the second run runs again (finished by the first), against the exact
count the committed offsets and their metadata predict.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer

from tests.chaos.conftest import StreamTopic
from tests.chaos.support import (
    committed,
    committed_finished,
    end_offsets,
    kill9,
    read_lines,
    redone_at_kill,
    spawn_worker,
    terminate,
    wait_for,
)

N = 20_000
PARTITIONS = 2
STUCK_EVERY = 2_000  # of the produced sequence: the stuck key's records, all in partition 0
STUCK = N // STUCK_EVERY


def _produce(bootstrap: str, topic: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for i in range(N):
        partition = i % PARTITIONS
        key = "stuck" if i % STUCK_EVERY == 0 else f"k{partition}-{i % 97}"
        while True:
            try:
                p.produce(topic, key=key.encode(), value=str(i).encode(), partition=partition)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0


def _trial(
    bootstrap: str, topic: str, tmp: Path, procs: list[subprocess.Popen[bytes]], metadata: bool
) -> tuple[int, int]:
    """(records the restart ran again, records it ran in all)."""
    group = f"g-stuck-{uuid.uuid4().hex[:8]}"
    tag = "on" if metadata else "off"
    switch = {"LANEWAY_COMMIT_METADATA": "1" if metadata else "0"}
    log = tmp / f"workers-{tag}.log"

    def spawn(out: Path, extra: dict[str, str]) -> subprocess.Popen[bytes]:
        w = spawn_worker(
            bootstrap, topic, group, out, log, sleep_ms=0, max_events=2_000, env={**switch, **extra}
        )
        procs.append(w)
        return w

    first_out = tmp / f"{tag}-1.txt"
    first = spawn(first_out, {"LW_STUCK_KEY": "stuck", "LW_STUCK_S": "20"})
    wait_for(lambda: len(read_lines(first_out)) >= N - STUCK, 60, f"{tag}: the other keys to finish")
    time.sleep(1.0)  # a few commits (every 0.2 s) after the last one finished
    assert first.poll() is None
    kill9(first)
    time.sleep(0.5)  # let a commit already on the wire land before reading the truth
    commits = committed_finished(bootstrap, group, topic, PARTITIONS)
    assert commits, "could not read the committed offsets"
    done = read_lines(first_out)
    assert len(done) == N - STUCK and all(ln.key != "stuck" for ln in done)
    predicted = redone_at_kill(done, commits)
    print(f"{tag}: committed {[(p, pos, len(f)) for p, (pos, f) in commits.items()]}; predicted {predicted}")

    second_out = tmp / f"{tag}-2.txt"
    second = spawn(second_out, {})
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    wait_for(lambda: committed(bootstrap, group, topic, PARTITIONS) == ends, 60, f"{tag}: the restart")
    assert terminate(second) == 0
    again = read_lines(second_out)
    finished_before = {(ln.partition, ln.offset) for ln in done}
    seen = finished_before | {(ln.partition, ln.offset) for ln in again}
    assert seen == {(p, o) for p in range(PARTITIONS) for o in range(ends[p])}  # nothing lost
    redone = sum(1 for ln in again if (ln.partition, ln.offset) in finished_before)
    assert redone == predicted  # each one the commit did not cover, once
    print(f"{tag}: the restart ran {len(again)}, {redone} of them again")
    return redone, len(again)


def test_a_stuck_key_does_not_make_a_kill_redo_its_partition(
    kafka_bootstrap: str,
    stream_topic: StreamTopic,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    topic = stream_topic(PARTITIONS)
    _produce(kafka_bootstrap, topic)
    on_redone, on_ran = _trial(kafka_bootstrap, topic, tmp_path, procs, metadata=True)
    off_redone, off_ran = _trial(kafka_bootstrap, topic, tmp_path, procs, metadata=False)
    print(f"redone: {on_redone} with metadata ({on_ran} run), {off_redone} without ({off_ran} run)")
    # without metadata the stuck key's partition is redone from its first record: ~10,000
    assert off_redone >= (N - STUCK) // PARTITIONS - STUCK
    # with it, only what had not finished runs: the stuck key's records
    assert on_ran == STUCK and on_redone == 0
    assert off_redone >= 100 * max(1, on_redone)
