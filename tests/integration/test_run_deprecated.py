"""`laneway run` of an app built with a deprecated keyword, on the real broker: the
LanewayDeprecationWarning shows once on stderr (a DeprecationWarning, hidden outside __main__,
said nothing; a new-user review), and the app runs as before: it processes, drains on SIGTERM,
commits and exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import TopicFactory
from tests.integration.helpers import committed, produce_keyed

ROOT = Path(__file__).resolve().parents[2]

_APP = """
import os
from laneway import App

app = App(
    "deprecated",
    bootstrap_servers=os.environ["LW_BOOTSTRAP"],
    group_id=os.environ["LW_GROUP"],
    exactly_once=True,
)

@app.handler(os.environ["LW_TOPIC"], on_failure="halt")
def handle(ev):
    print("handled", ev.offset, flush=True)
"""


def test_laneway_run_shows_a_deprecated_keyword_s_warning_once_and_runs(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str, tmp_path: Path
) -> None:
    topic = make_topic(partitions=1)
    produce_keyed(kafka_bootstrap, topic, 3, 1)
    (tmp_path / "deprecated_app.py").write_text(_APP)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env |= {
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "LW_BOOTSTRAP": kafka_bootstrap,
        "LW_TOPIC": topic,
        "LW_GROUP": group_id,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "laneway.ops.cli", "run", "deprecated_app:app", "--log-level", "WARNING"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        handled = [proc.stdout.readline().strip() for _ in range(3)]
        assert handled == ["handled 0", "handled 1", "handled 2"], handled
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    said = (
        f"{tmp_path / 'deprecated_app.py'}:5: LanewayDeprecationWarning: App(exactly_once=...) is deprecated "
        "and goes in the next release: use exactly_once=ExactlyOnce() (not a bool)"
    )
    assert err.count("is deprecated") == 1 and err.splitlines()[0] == said, err
    assert committed(kafka_bootstrap, group_id, topic, 1) == {0: 3}
