"""`laneway run`'s bad options: one line and exit 2, before anything starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from laneway import App
from laneway.ops import cli
from laneway.ops.cli import app
from laneway.ops.run_cli import load_app


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--log-level", "bogus"], "--log-level: unknown level 'bogus'"),
        (["--metrics-port", "99999"], "error: --metrics-port: must be a port number"),  # the option, as given
    ],
)
def test_a_bad_option_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: list[str], says: str
) -> None:
    source = 'from laneway import App\napp = App("x", bootstrap_servers="127.0.0.1:1")\n'
    (tmp_path / "someapp.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    if not any(c.name == "run" for c in app.registered_commands):
        cli._register_subcommands()
    result = CliRunner().invoke(app, ["run", "someapp:app", *option])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0]


@pytest.mark.parametrize("host", [None, "127.0.0.1"])
def test_a_metrics_port_in_use_names_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str | None
) -> None:
    """A review: `--metrics-port 19499` in use said `metrics_server.port: cannot serve on ...`, a
    field the command line's user never wrote; with `--metrics-host` given, the port is still
    the port's fault."""
    source = (
        'from laneway import App\napp = App("x", bootstrap_servers="127.0.0.1:1")\n'
        '@app.handler("t")\ndef h(ev):\n    pass\n'
    )
    (tmp_path / "portapp.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(App, "check", lambda self: None)  # no broker here: the port comes next
    if not any(c.name == "run" for c in app.registered_commands):
        cli._register_subcommands()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        extra = ["--metrics-host", host] if host else []
        result = CliRunner().invoke(app, ["run", "portapp:app", "--metrics-port", str(port), *extra])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        f"error: --metrics-port: cannot serve on 127.0.0.1:{port}"
    ), lines


def _import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> list[str]:
    """``laneway run NAME:app`` of a module holding ``source``: its non-blank output lines, after
    asserting exit 2."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    if not any(c.name == "run" for c in app.registered_commands):
        cli._register_subcommands()
    result = CliRunner().invoke(app, ["run", f"{name}:app"])
    assert result.exit_code == 2, result.output
    return [line for line in result.output.splitlines() if line.strip()]


def test_an_error_in_the_apps_module_names_its_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # seen: `error: invalid literal for int() with base 10: 'ten'`, with no file or line
    source = (
        'from laneway import App\nCONCURRENCY = int("ten")\napp = App("x", bootstrap_servers="127.0.0.1:1")\n'
    )
    lines = _import(tmp_path, monkeypatch, "badmodapp", source)
    assert len(lines) == 1 and "invalid literal for int()" in lines[0], lines
    assert f"({tmp_path / 'badmodapp.py'}, line 2)" in lines[0], lines


def test_an_error_raised_in_a_library_the_module_called_names_the_modules_line_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a review: `(.../json/decoder.py, line 353)`, the standard library's line, not the app's
    lines = _import(tmp_path, monkeypatch, "badjsonapp", 'import json\nSETTINGS = json.loads("{bad")\n')
    assert len(lines) == 1 and lines[0].startswith("error: JSONDecodeError: "), lines
    assert f"({tmp_path / 'badjsonapp.py'}, line 2; raised in " in lines[0], lines
    assert lines[0].endswith(")") and "decoder.py, line " in lines[0], lines


def test_a_target_that_is_not_an_app_names_its_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _import(tmp_path, monkeypatch, "notanapp", "app = 3\n")
    assert lines == ["error: notanapp:app is of type int, not a laneway.App"]  # not "a int"


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> list[str]:
    """``laneway run ARGS`` from ``tmp_path``; its non-blank output lines, after asserting exit 2."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    if not any(c.name == "run" for c in app.registered_commands):
        cli._register_subcommands()
    result = CliRunner().invoke(app, ["run", *args])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return [line for line in result.output.splitlines() if line.strip()]


def test_metrics_host_without_a_port_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # seen: `--metrics-host 0.0.0.0` alone started the app with no metrics server and no word
    (tmp_path / "hostonly.py").write_text(
        'from laneway import App\napp = App("x", bootstrap_servers="127.0.0.1:1")\n'
    )
    lines = _run(tmp_path, monkeypatch, "hostonly:app", "--metrics-host", "0.0.0.0")
    assert lines == [
        "error: --metrics-host: 0.0.0.0 needs --metrics-port (the app has no metrics server): "
        "add --metrics-port 9100, say"
    ]


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("mod1.py:app", "'mod1.py' is a file path, not a module: give a module path, `laneway run mod1:app`"),
        ("./mod1.py:app", "`laneway run mod1:app`, from the directory you are in"),
        ("./mod1:app", "`laneway run mod1:app`, from the directory you are in"),
        ("pkg/mod1.py:app", "`laneway run pkg.mod1:app`, from the directory you are in"),
        ("nosuch.py:app", "`laneway run nosuch:app`"),
    ],
)
def test_a_file_path_target_says_to_give_a_module_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, says: str
) -> None:
    # seen: "No module named 'mod1.py'; 'mod1' is not a package" and "the 'package' argument
    # is required to perform a relative import for './mod1.py'"
    (tmp_path / "mod1.py").write_text("raise KeyError('imported')\n")  # never imported
    (lines,) = _run(tmp_path, monkeypatch, target)
    assert lines.startswith("error: ") and says in lines, lines


def test_an_absolute_file_path_names_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (lines,) = _run(tmp_path, monkeypatch, f"{tmp_path / 'mod1.py'}:app")
    assert f"`laneway run mod1:app`, from {tmp_path} (the directory holding mod1.py)" in lines, lines


def test_an_exception_while_importing_is_one_line_with_type_and_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # seen: a KeyError in the module printed typer's and click's traceback, exit 1
    (tmp_path / "envapp.py").write_text('import os\n\nTOPIC = os.environ["LANEWAY_NO_SUCH_VAR"]\n')
    (tmp_path / "syntaxapp.py").write_text("app = (\n")
    lines = _run(tmp_path, monkeypatch, "envapp:app")
    assert lines == [f"error: KeyError: 'LANEWAY_NO_SUCH_VAR' ({tmp_path / 'envapp.py'}, line 3)"]
    (line,) = _run(tmp_path, monkeypatch, "syntaxapp:app")
    assert line.startswith("error: SyntaxError: ") and f"({tmp_path / 'syntaxapp.py'}, line 1)" in line, line


def test_a_dotted_attribute_is_looked_up_part_by_part(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # seen: `laneway run e2:app.x` said "module 'e2' has no attribute 'app.x'"
    (tmp_path / "dottedapp.py").write_text(
        "from types import SimpleNamespace\n"
        "from laneway import App\n"
        'app = SimpleNamespace(x=App("x", bootstrap_servers="127.0.0.1:1"), n=3)\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = load_app("dottedapp:app.x")
    assert isinstance(loaded, App) and loaded.settings.name == "x"
    assert _run(tmp_path, monkeypatch, "dottedapp:app.n") == [
        "error: dottedapp:app.n is of type int, not a laneway.App"
    ]


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("dottedmiss:nope", "error: module 'dottedmiss' has no attribute 'nope'"),
        ("dottedmiss:nope.x", "error: module 'dottedmiss' has no attribute 'nope'"),
        ("dottedmiss:app.y", "error: 'dottedmiss:app' has no attribute 'y'"),
        ("dottedmiss:app.x.z", "error: 'dottedmiss:app.x' has no attribute 'z'"),
        ("dottedmiss:app.", "error: expected module:attribute, got 'dottedmiss:app.'"),
    ],
)
def test_a_missing_part_of_a_dotted_attribute_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, says: str
) -> None:
    (tmp_path / "dottedmiss.py").write_text("from types import SimpleNamespace\napp = SimpleNamespace(x=1)\n")
    assert _run(tmp_path, monkeypatch, target) == [says]
