"""An exactly-once app whose transactional id the ACLs deny (the app user is granted ``app-*``
and ``laneway-app-*`` ids, the app asks for ``other-tx``): ``laneway run`` exits 2 with the one
line ``error: access denied: ...`` naming the user and the id, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.security.conftest import AppTopicFactory, SecureBroker
from tests.security.support import BOUND, ROOT, assert_no_password


def test_laneway_run_with_a_denied_transactional_id_exits_2_with_one_line(
    secure_broker: SecureBroker, app_topic: AppTopicFactory, tmp_path: Path
) -> None:
    topic = app_topic(partitions=1)
    name = f"eos_denied_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        "from laneway import App, ExactlyOnce, Timeouts\n"
        f"app = App('app-eos', bootstrap_servers={secure_broker.bootstrap!r},\n"
        f"          group_id='app-{uuid.uuid4().hex[:8]}', timeouts=Timeouts(startup=20),\n"
        "          exactly_once=ExactlyOnce(transactional_id='other-tx'))\n"
        f"app.handler({topic!r}, on_failure='halt')(lambda e: None)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("LANEWAY_BOOTSTRAP", "LANEWAY_CLIENT_CONFIG")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(tmp_path)])
    env["COLUMNS"] = "200"
    config = str(secure_broker.config_path("app"))
    proc = subprocess.run(
        [sys.executable, "-m", "laneway.ops.cli", "run", f"{name}:app", "--client-config", config],
        capture_output=True,
        text=True,
        timeout=BOUND + 30,
        env=env,
        cwd=ROOT,
    )
    print(proc.stderr)  # shown when it fails
    assert_no_password(f"{proc.stdout}\n{proc.stderr}", secure_broker.passwords, what="run")
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    # the INFO lines of the start (the group's join ...) may precede it: the error is one line, the last
    errors = [line for line in proc.stderr.strip().splitlines() if "error" in line.lower()]
    assert len(errors) == 1, proc.stderr
    line = errors[0]
    assert proc.stderr.strip().splitlines()[-1] == line, proc.stderr
    assert line.startswith("error: access denied: "), line
    assert "user 'app'" in line and "transactional id 'other-tx-0'" in line, line
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in line and "--transactional-id other-tx-0" in line, line
