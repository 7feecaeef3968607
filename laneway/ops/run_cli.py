"""``laneway run module:app``: run a Laneway app declared in an importable module."""

from __future__ import annotations

import importlib
import os
import re
import signal
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from laneway.errors import ConfigError, LanewayError
from laneway.interrupts import graceful_interrupts
from laneway.kafka import secrets
from laneway.kafka.client_config import active
from laneway.lifecycle import importing
from laneway.ops.bootstrap import with_client_config
from laneway.ops.log_level import LogLevel, setup_logging

if TYPE_CHECKING:
    from laneway.app import App

__all__ = ["load_app", "register"]


def load_app(target: str) -> object:
    """Import ``module:attribute`` and return the attribute; a dotted attribute
    (``module:app.x``) is looked up part by part, and a missing part is a ValueError naming it
    and what it was looked up on. A file path given for the module (``mod1.py:app``,
    ``./mod1.py:app``) is a ValueError saying which module path to give."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr or "" in attr.split("."):
        raise ValueError(f"expected module:attribute, got {target!r}")
    if module_name.startswith(".") or "/" in module_name or os.sep in module_name or _is_py_file(module_name):
        raise ValueError(_module_path_hint(module_name, attr))
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if module_name.endswith(".py") and exc.name in (module_name, module_name.removesuffix(".py")):
            raise ValueError(_module_path_hint(module_name, attr)) from None
        raise
    first, *rest = attr.split(".")
    try:
        obj = getattr(module, first)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {first!r}") from None
    path = f"{module_name}:{first}"
    for name in rest:
        try:
            obj = getattr(obj, name)
        except AttributeError:
            raise ValueError(f"{path!r} has no attribute {name!r}") from None
        path = f"{path}.{name}"
    return obj


def register(app: typer.Typer) -> None:
    """Add ``run`` to the root ``laneway`` app."""

    @app.command("run")
    @with_client_config
    def run(
        target: Annotated[
            str,
            typer.Argument(
                help="module:attribute of a laneway.App; the attribute may be dotted (mod1:apps.orders)"
            ),
        ],
        metrics_port: Annotated[
            int | None, typer.Option(help="serve /metrics and /healthz on this port (0: any free one)")
        ] = None,
        metrics_host: Annotated[
            str | None,
            typer.Option(
                help="the address they listen on (default 127.0.0.1; 0.0.0.0: all); needs "
                "--metrics-port unless the app has a metrics_server"
            ),
        ] = None,
        log_level: LogLevel = "INFO",
    ) -> None:
        """Run a Laneway app until SIGINT/SIGTERM, then drain, commit and exit.

        Example: laneway run myproject.consumers:app --metrics-port 9100

        A second Ctrl-C exits at once (status 130): records processed but not committed yet
        are consumed again on the next start (at-least-once).

        Exit codes: 0 after a signal's drain; 130 after a second Ctrl-C; 2 for a bad target
        (give a module path, mod1:app, not a file), an exception raised while the module is
        imported (printed as one line: its type, message, file and line), a bad setting, found
        while the module builds its app or at start (a missing topic, no broker, a metrics port
        in use), or for an app its module ran as it was imported (an app.run() not under if
        __name__ == "__main__"); 1 when the app halted while running (on_failure="halt", a dead
        letter that could not be written).
        """
        from laneway.app import App

        setup_logging(log_level)

        def stop_before_start(signum: int, frame: object) -> None:
            # SIGINT/SIGTERM while the app module is still importing: nothing runs yet, nothing to drain
            raise SystemExit(0)

        signal.signal(signal.SIGTERM, stop_before_start)
        signal.signal(signal.SIGINT, stop_before_start)
        try:
            with importing(target):  # an app.run() at the module's top level raises at once
                obj = load_app(target)
        except LanewayError as exc:  # a ConfigError while the module builds its app
            typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2) from None
        except TypeError as exc:  # e.g. App(..., concurency=4): an unknown option
            match = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
            message = f"{match.group(1)}: unknown option" if match else str(exc)
            typer.secho(f"error: {message}{_where(exc)}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2) from None
        except Exception as exc:  # a bad target, or the module raised as it was imported
            typer.secho(f"error: {_import_error(exc)}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2) from None
        if not isinstance(obj, App):
            kind = type(obj).__name__
            typer.secho(f"error: {target} is of type {kind}, not a laneway.App", err=True, fg="red")
            raise typer.Exit(2)
        if obj.state != "new":  # its module ran it as it was imported: once is all an App runs
            typer.secho(f"error: {_ran_at_import(target, obj)}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2)
        try:
            obj.settings = obj.settings.serving_metrics(port=metrics_port, host=metrics_host)
        except LanewayError as exc:  # --metrics-port 99999
            typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2) from None
        if from_file := active():  # --client-config: over the app's own kafka_config
            secrets.remember(from_file)
            try:
                kafka_config = {**obj.settings.kafka_config, **from_file}
                origins = dict.fromkeys(from_file, "--client-config")
                obj.settings = obj.settings.with_kafka_config(kafka_config, origins)
            except ConfigError as exc:  # group.id=... in the file: refused as App refuses it
                said = str(exc) if exc.field == "--client-config" else f"--client-config: {exc}"
                typer.secho(f"error: {said}", err=True, fg=typer.colors.RED)
                raise typer.Exit(2) from None
        try:
            with graceful_interrupts(obj.stop):  # a second Ctrl-C exits at once
                obj.run(install_signal_handlers=False)
        except ConfigError as exc:  # found at start: a missing topic, no broker, a port in use
            options: dict[str, tuple[str, object]] = {
                "metrics_server.port": ("--metrics-port", metrics_port),
                "metrics_server.host": ("--metrics-host", metrics_host),
            }
            option, value = options.get(exc.field, (exc.field, None))
            if value is not None:  # --metrics-port 9100 in use: named as the user gave it
                exc = ConfigError(option, exc.reason)
            typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2) from None
        except LanewayError as exc:  # the app halted while running
            typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
            raise typer.Exit(1) from None


def _is_py_file(name: str) -> bool:
    return name.endswith(".py") and Path(name).is_file()


def _module_path_hint(path: str, attr: str) -> str:
    """The error for a file path given as the module: the module path to give, and where from."""
    file = Path(path if path.endswith(".py") else path + ".py")
    parts = [p for p in file.with_suffix("").parts if p not in (".", "")]
    if file.is_absolute() or ".." in parts or not parts:
        module, where = file.stem, f"{file.parent} (the directory holding {file.name})"
    else:
        module, where = ".".join(parts), "the directory you are in"
    return (
        f"{path!r} is a file path, not a module: give a module path, "
        f"`laneway run {module}:{attr}`, from {where}"
    )


def _ran_at_import(target: str, app: App) -> str:
    """The error for an app its module started while ``laneway run`` imported it (an
    ``app.run()`` with no ``if __name__`` guard); a running one is shut down first."""
    if app.state == "stopped":
        done = "already ran (and stopped) while its module was imported: an app.run() at its top level"
    else:
        app.shutdown()
        done = "was started while its module was imported: an app.start() or app.run() at its top level"
    guard = 'guard that call with `if __name__ == "__main__":` and `laneway run` runs the app'
    return f"{target} {done}; {guard}"


def _import_error(exc: Exception) -> str:
    """One line for an error while the target loads: Laneway's own (a bad target, a module not
    found) as it is; one raised by the user's code with its type, file and line."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{type(exc).__name__}: {exc.msg} ({exc.filename}, line {exc.lineno})"
    where = _where(exc)
    if not where and isinstance(exc, ValueError | ImportError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}{where}"


def _where(exc: BaseException) -> str:
    """`` (FILE, line N)``: where in the user's code ``exc`` was raised (the innermost frame
    outside Laneway, the import machinery, the standard library and the installed packages),
    with the innermost frame's place when the error came from a library the code called
    (``json.loads``, say), so an error in the app's module is found without a traceback; ``""``
    when it was raised by Laneway itself (a bad target, say)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = sysconfig.get_paths()
    libraries = {os.path.abspath(paths[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    outside: list[traceback.FrameSummary] = []  # innermost first
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        name = frame.filename
        if name.startswith("<") or os.path.abspath(name).startswith(package + os.sep):
            continue
        if "importlib" in name:
            continue
        outside.append(frame)
    if not outside:
        return ""
    inner = outside[0]
    for frame in outside:
        path = os.path.abspath(frame.filename)
        if not any(path.startswith(lib) for lib in libraries):
            if frame is inner:
                return f" ({frame.filename}, line {frame.lineno})"
            return (
                f" ({frame.filename}, line {frame.lineno}; raised in {inner.filename}, line {inner.lineno})"
            )
    return f" ({inner.filename}, line {inner.lineno})"
