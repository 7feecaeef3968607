"""A stop while the group waits for a member that was killed: replica C joins and is killed -9,
replacement D joins, and the group's rebalance waits for C's session to end. A member's commits
and its leave queue behind its JoinGroup at the broker meanwhile. At librdkafka's 45 s session,
instance A, stopped with SIGTERM then, could not commit before its stop gave up: exit 1 after
20 s, no final commit (a review). At Laneway's 10 s session (``laneway.kafka.session``) it
commits and exits 0. Then D takes every partition and catches up: nothing is lost, and each
key's records finish in order up to replays."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.chaos.conftest import StreamTopic
from tests.chaos.support import (
    StreamProducer,
    check_stream,
    committed,
    end_offsets,
    kill9,
    read_lines,
    spawn_worker,
    terminate,
    wait_for,
)

PARTITIONS = 4


def test_a_stop_while_the_group_waits_for_a_killed_member_commits_and_exits_0(
    kafka_bootstrap: str,
    stream_topic: StreamTopic,
    group_id: str,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    topic = stream_topic(PARTITIONS)
    producer = StreamProducer(kafka_bootstrap, topic, keys=50, rate=200, backlog=500).start()
    out = tmp_path / "done.txt"  # shared: one O_APPEND write per record, so file order is time order

    def spawn(name: str) -> subprocess.Popen[bytes]:
        # Laneway's own session settings, not the chaos suite's 6 s
        w = spawn_worker(
            kafka_bootstrap, topic, group_id, out, tmp_path / f"{name}.log", env={"LW_DEFAULT_SESSION": "1"}
        )
        procs.append(w)
        return w

    def pids() -> set[int]:
        return {line.pid for line in read_lines(out)}

    a = spawn("a")
    wait_for(lambda: a.pid in pids(), 60, "A to process records")
    c = spawn("c")
    wait_for(lambda: c.pid in pids(), 60, "C to be assigned partitions and process records")
    kill9(c)
    d = spawn("d")
    d_log = tmp_path / "d.log"
    wait_for(lambda: " started" in d_log.read_text(errors="replace"), 60, "D to join the group")
    # D's JoinGroup is in, and A has heard of the rebalance at its next heartbeat (3 s) and sent
    # its own, which the broker answers once C's session has ended
    time.sleep(4.0)

    assert terminate(a, timeout=60) == 0, (tmp_path / "a.log").read_text()[-3000:]
    said = (tmp_path / "a.log").read_text(errors="replace")
    assert "still runs" not in said and "error:" not in said, said[-3000:]

    produced = producer.stop()
    ends = end_offsets(kafka_bootstrap, topic, PARTITIONS)
    wait_for(lambda: committed(kafka_bootstrap, group_id, topic, PARTITIONS) == ends, 120, "D to catch up")
    assert terminate(d) == 0, d_log.read_text()[-3000:]
    tally = check_stream(produced, read_lines(out))
    assert tally.produced == sum(ends.values())
