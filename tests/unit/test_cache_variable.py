"""``$LANEWAY_CACHE`` set but empty is refused where it is read, as the other variables are: taken
as the current folder, the jars and the broker's record went wherever a command ran (a review)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from laneway import jars
from laneway.errors import ConfigError


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_cache_variable_is_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANEWAY_CACHE", value)
    with pytest.raises(ConfigError, match="LANEWAY_CACHE: is set but empty"):
        jars.cache_dir()


def test_the_cache_is_the_variable_or_the_home_folders(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LANEWAY_CACHE", str(tmp_path))
    assert jars.cache_dir() == tmp_path
    monkeypatch.delenv("LANEWAY_CACHE")
    assert jars.cache_dir() == Path.home() / ".cache" / "laneway"


def test_the_command_line_says_it_in_one_line_and_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "laneway.ops.cli", "broker", "status"],
        env={"LANEWAY_CACHE": "", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines == [
        "error: LANEWAY_CACHE: is set but empty: set it to a folder, or unset it (then ~/.cache/laneway)"
    ]
    assert not list(tmp_path.iterdir())  # nothing written
