"""Laneway's deprecation warnings reach the user: a plain ``DeprecationWarning`` is hidden by
Python's default filters outside ``__main__``, so ``App(..., exactly_once=True)`` in a module that
``laneway run`` imports (or that a script imports) said nothing (a new-user review). They are
:class:`LanewayDeprecationWarning`, shown once per call site; warning options given to the
interpreter still decide. Subprocesses: pytest's own filters would hide what a user sees."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from laneway import App, LanewayDeprecationWarning

ROOT = Path(__file__).resolve().parents[2]

#: no broker at 127.0.0.1:1: the start fails after a second, as it did before the warning showed
_APP = """
from laneway import App

app = App("dep", bootstrap_servers="127.0.0.1:1", exactly_once=True, startup_timeout=1)

@app.handler("dep-in")
def handle(ev):
    pass
"""

SAID = (
    "LanewayDeprecationWarning: App(startup_timeout=..., exactly_once=...) is deprecated and goes in "
    "the next release: use timeouts=Timeouts(startup=...); exactly_once=ExactlyOnce() (not a bool)"
)


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "depapp.py").write_text(_APP)
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    environ["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    return subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        env={**environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_laneway_run_shows_the_deprecation_once_and_fails_as_before(tmp_path: Path) -> None:
    done = _run(tmp_path, "-m", "laneway.ops.cli", "run", "depapp:app")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert done.stderr.count("is deprecated") == 1, done.stderr
    assert lines[0] == f"{tmp_path / 'depapp.py'}:4: {SAID}", done.stderr
    assert lines[1].strip().startswith('app = App("dep"'), done.stderr  # Python's format: the line
    assert len(lines) == 3 and lines[2].startswith("error: "), done.stderr  # the start's own line


def test_a_script_that_imports_the_app_shows_it_too(tmp_path: Path) -> None:
    done = _run(tmp_path, "-c", "import depapp; import depapp")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(SAID) == 1, done.stderr


def test_the_interpreter_s_warning_options_decide(tmp_path: Path) -> None:
    """``-W error::DeprecationWarning`` makes it an error; ``PYTHONWARNINGS=ignore`` hides it."""
    done = _run(tmp_path, "-W", "error::DeprecationWarning", "-m", "laneway.ops.cli", "run", "depapp:app")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: {SAID} ({tmp_path / 'depapp.py'}, line 4)"], done.stderr
    quiet = _run(tmp_path, "-c", "import depapp", env={"PYTHONWARNINGS": "ignore"})
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_it_is_a_deprecation_warning() -> None:
    """Code that catches or filters DeprecationWarning (pytest.warns, -W) still takes it."""
    assert issubclass(LanewayDeprecationWarning, DeprecationWarning)
    with pytest.warns(DeprecationWarning, match="exactly_once"):
        App("a", bootstrap_servers="127.0.0.1:9092", exactly_once=False)
