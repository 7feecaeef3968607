"""``App.run()`` in a program that set up no logging shows Laneway's INFO lines on stderr,
formatted; a program that set up its own keeps it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import logging, sys
    from laneway import App

    if sys.argv[1] == "configured":
        logging.basicConfig(level=logging.ERROR, format="%(message)s")
    app = App("t", bootstrap_servers="127.0.0.1:1")

    def start():
        logging.getLogger("laneway.app").info("started here")
        logging.getLogger("other.lib").info("another library's info")
        app.stop()

    app.start = start
    app.shutdown = lambda: None
    app.run(install_signal_handlers=False)
    """
)


def _stderr(mode: str) -> str:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_run_without_logging_set_up_shows_laneways_info_lines() -> None:
    err = _stderr("bare")
    line = next(line for line in err.splitlines() if "started here" in line)
    assert " INFO laneway.app: started here" in line and line[:4].isdigit()  # a time first
    assert "another library's info" not in err


def test_run_keeps_the_programs_own_logging() -> None:
    assert "started here" not in _stderr("configured")
