"""`laneway run` and a script's own `App.run()` on the real broker: Ctrl-C drains, a second
Ctrl-C exits 130 at once while a handler blocks, and what was not committed is left for the
next start (at-least-once)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from laneway.interrupts import FIRST_MESSAGE, FORCED_MESSAGE
from tests.conftest import TopicFactory
from tests.integration.helpers import committed, produce_keyed

ROOT = Path(__file__).resolve().parents[2]

#: offset 1's handler never returns, so the drain never ends
_APP = """
import os, threading
from laneway import App, Event, Timeouts

app = App(
    "blocker",
    bootstrap_servers=os.environ["LW_BOOTSTRAP"],
    group_id=os.environ["LW_GROUP"],
    timeouts=Timeouts(commit_interval=0.2, shutdown=600),
)

@app.handler(os.environ["LW_TOPIC"], on_failure="halt")
def handle(ev: Event) -> None:
    if ev.offset >= 1:
        print("blocking", flush=True)
        threading.Event().wait()
"""


#: the command line, and a script that calls ``app.run()`` itself
_COMMANDS = {
    "laneway-run": ["-m", "laneway.ops.cli", "run", "blocker_app:app", "--log-level", "WARNING"],
    "app-run": ["-c", "import blocker_app; blocker_app.app.run()"],
}


@pytest.mark.timeout(300)  # a guard against a hang: before the fix, no hint and no forced exit
@pytest.mark.parametrize("how", list(_COMMANDS))
def test_a_second_ctrl_c_exits_130_and_leaves_the_blocked_record_uncommitted(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, tmp_path: Path, how: str
) -> None:
    topic = make_topic(partitions=1)
    produce_keyed(kafka_bootstrap, topic, 2, 1)
    (tmp_path / "blocker_app.py").write_text(_APP)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "LW_BOOTSTRAP": kafka_bootstrap,
        "LW_TOPIC": topic,
        "LW_GROUP": group_id,
    }
    proc = subprocess.Popen(
        [sys.executable, *_COMMANDS[how]],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    seen: list[str] = []
    try:
        first = proc.stdout.readline()
        assert first.strip() == "blocking", first + proc.stderr.read()  # at EOF, the exit's reason
        proc.send_signal(signal.SIGINT)  # the drain waits for the blocked handler (600 s)
        for line in proc.stderr:  # handled (two signals at once would count as one)
            seen.append(line.rstrip("\n"))
            if seen[-1] == FIRST_MESSAGE:
                break
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)  # a guard: without the forced exit it waits out the drain
    finally:
        proc.kill()
        proc.wait()
    lines = seen + proc.communicate()[1].splitlines()
    assert code == 130, lines
    assert lines.count(FIRST_MESSAGE) == 1 and lines[-1] == FORCED_MESSAGE, lines
    # the blocked record (offset 1) was not committed: the next start consumes it again
    assert committed(kafka_bootstrap, group_id, topic, 1)[0] <= 1


#: each record's output goes to a topic that does not exist
_MISSING_OUTPUT = """
import os
from laneway import App, Event, Timeouts

app = App(
    "outfail",
    bootstrap_servers=os.environ["LW_BOOTSTRAP"],
    group_id=os.environ["LW_GROUP"],
    timeouts=Timeouts(commit_interval=0.2, revoke=1),
)

@app.handler(os.environ["LW_TOPIC"], on_failure="halt")
def handle(ev: Event) -> None:
    ev.emit(os.environ["LW_TOPIC"] + "-missing", ev.value, key=ev.key)
    print("emitted", flush=True)
"""


@pytest.mark.timeout(120)
def test_sigterm_while_outputs_wait_for_a_missing_topic_exits_1_naming_it(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, tmp_path: Path
) -> None:
    """`laneway run`, SIGTERM while the emitted records wait for a topic that does not exist:
    the exit comes within the revoke timeout (at least 5 s of flushing), with status 1, one
    ERROR line and the `error:` line naming the topic and the broker's reason; nothing is
    committed. It used to exit 0 after 20 s, saying nothing."""
    topic = make_topic(partitions=1)
    produce_keyed(kafka_bootstrap, topic, 3, 1)
    (tmp_path / "outfail_app.py").write_text(_MISSING_OUTPUT)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "LW_BOOTSTRAP": kafka_bootstrap,
        "LW_TOPIC": topic,
        "LW_GROUP": group_id,
    }
    command = [sys.executable, "-m", "laneway.ops.cli", "run", "outfail_app:app", "--log-level", "WARNING"]
    proc = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        assert first.strip() == "emitted", first + proc.communicate()[1]
        time.sleep(0.5)  # the commit's flush is under way
        proc.send_signal(signal.SIGTERM)
        asked = time.monotonic()
        code = proc.wait(timeout=60)
        took = time.monotonic() - asked
    finally:
        proc.kill()
        proc.wait()
    err = [line for line in proc.communicate()[1].splitlines() if not line.startswith("%")]
    reason = f"emitted records could not be produced to {topic}-missing: Broker: Unknown topic or partition"
    assert code == 1, err
    assert took < 10, err  # the flush's 5 s, the close
    assert [line for line in err if " ERROR " in line and reason in line] != [], err
    assert len([line for line in err if " ERROR " in line]) == 1, err
    assert err[-1].startswith(f"error: {reason}"), err
    assert committed(kafka_bootstrap, group_id, topic, 1)[0] < 0


#: each record's offset goes to a module's buffered file; the app stops once all are handled
_BUFFERED = """
import os, threading
from laneway import App, Event, Timeouts

out = open(os.environ["LW_OUT"], "w", buffering=1 << 16)
app = App(
    "buffered",
    bootstrap_servers=os.environ["LW_BOOTSTRAP"],
    group_id=os.environ["LW_GROUP"],
    timeouts=Timeouts(commit_interval=0.2),
)
seen = [0]

@app.handler(os.environ["LW_TOPIC"], on_failure="halt")
def handle(ev: Event) -> None:
    out.write(f"{ev.offset}\\n")
    seen[0] += 1
    if seen[0] == int(os.environ["LW_N"]):
        threading.Thread(target=app.stop).start()
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["laneway-run", "app-run"])
def test_a_modules_buffered_file_is_flushed_at_exit_with_the_collector_tuned(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, tmp_path: Path, how: str
) -> None:
    """With ``gc_tuning`` on (the default), the start freezes what start-up made; the stop
    unfreezes it, so a module's buffered file, written by the handler, is finalized at the
    interpreter's exit and flushed. Left frozen, nothing of it reached the file (a review:
    records committed whose lines were lost)."""
    topic = make_topic(partitions=1)
    produce_keyed(kafka_bootstrap, topic, 50, 5)
    (tmp_path / "blocker_app.py").write_text(_BUFFERED)
    out = tmp_path / "out.txt"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "LW_BOOTSTRAP": kafka_bootstrap,
        "LW_TOPIC": topic,
        "LW_GROUP": group_id,
        "LW_OUT": str(out),
        "LW_N": "50",
    }
    done = subprocess.run(
        [sys.executable, *_COMMANDS[how]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr[-2000:]
    written = [int(line) for line in out.read_text().split()]
    # each record once, each key's in offset order (keys run on several threads: no order across them)
    assert sorted(written) == list(range(50))
    for key in range(5):
        mine = [o for o in written if o % 5 == key]
        assert mine == sorted(mine), (key, written)
    assert committed(kafka_bootstrap, group_id, topic, 1) == {0: 50}
