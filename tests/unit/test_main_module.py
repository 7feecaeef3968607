"""``python -m laneway`` runs the ``laneway`` command line (it failed: "No module named
laneway.__main__"), for an environment whose scripts folder is not on ``PATH``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


def test_python_m_laneway_is_the_laneway_command() -> None:
    by_module = _run("-m", "laneway", "--help")
    assert by_module.returncode == 0, by_module.stderr
    assert "Usage: laneway " in by_module.stdout
    for command in ("broker", "run", "topics", "catalog", "pipeline"):  # every sub-app registered
        assert command in by_module.stdout, by_module.stdout
    # the entry point in pyproject.toml, [project.scripts] laneway = "laneway.ops.cli:main"
    entry_point = "import sys; sys.argv[0] = 'laneway'; from laneway.ops.cli import main; main()"
    by_entry_point = _run("-c", entry_point, "--help")
    assert by_module.stdout == by_entry_point.stdout


def test_python_m_laneway_passes_the_exit_code() -> None:
    bad = _run("-m", "laneway", "topics", "create", "orders", "--partitions", "x")
    assert bad.returncode == 2 and "--partitions" in bad.stderr, bad.stderr
