"""The ``laneway`` command line.

laneway broker start|stop|status     a local Kafka broker on 127.0.0.1
laneway run module:app               run a Laneway app
laneway topics|lag|replay|dlq|health operate a cluster
laneway top URL [URL ...]            a live view of running instances
laneway catalog ...                  the data-catalog domain
laneway pipeline run                 the Spark pipeline into Delta tables
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from laneway import jars
from laneway.errors import ConfigError
from laneway.ops import broker as broker_mod
from laneway.ops.help_text import reflow_app

__all__ = ["app", "main"]

app = typer.Typer(
    help="Laneway: ordered, at-least-once, key-parallel Kafka processing.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
broker_app = typer.Typer(help="A local Kafka broker (KRaft) on 127.0.0.1, for development and tests.")
app.add_typer(broker_app, name="broker")


def _state_file() -> Path:
    return jars.cache_dir() / "broker" / "state.json"


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a one-line error to stderr and return the Exit to raise."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)


@broker_app.command("start")
def broker_start(
    port: Annotated[int, typer.Option(help="listener port; 0 picks a free one")] = 0,
    data_dir: Annotated[
        Path | None, typer.Option(help="log directory; default a new one under the cache")
    ] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the broker to answer")] = 60.0,
    secure: Annotated[
        bool,
        typer.Option(
            "--secure",
            help="SASL_SSL (SCRAM-SHA-512, a throwaway CA), ACLs, and client files for admin, app, reader",
        ),
    ] = False,
) -> None:
    """Start a detached broker and print its bootstrap address.

    With --secure it also prints the client file of each user (admin, app, reader), e.g.
    `laneway topics list --client-config <app file>`.

    Example: export LANEWAY_BOOTSTRAP=$(laneway broker start)
    """
    state = _state_file()
    info = broker_mod.BrokerInfo.load(state)
    if info is not None and info.alive():
        mismatch = (
            broker_mod.kind_mismatch(info, secure=secure)
            or broker_mod.port_mismatch(info, port)
            or broker_mod.data_dir_mismatch(info, data_dir)
        )
        if mismatch:
            raise fail(mismatch)
        _print_started(info)
        typer.secho(f"already running (pid {info.pid})", err=True)
        return
    root = state.parent
    new_root = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    data = data_dir.resolve() if data_dir is not None else Path(tempfile.mkdtemp(prefix="data-", dir=root))
    undo_data = _Created(data) if data_dir is not None else _Created(data, made=data)
    b = broker_mod.LocalBroker(data, port=port or None, secure=secure)
    try:
        b.start(timeout=timeout, detach=True)
    except BaseException as exc:  # a BrokerError, or Ctrl-C while waiting
        b.stop()  # the process it started, if one still runs
        undo_data.remove()
        if new_root:  # and empty: other starts may be adding theirs, the jars stay
            with contextlib.suppress(OSError):
                root.rmdir()
        if isinstance(exc, broker_mod.BrokerError):
            raise fail(str(exc)) from exc
        raise
    b.info().save(state)
    _print_started(b.info())
    typer.secho(f"broker pid {b.info().pid}, data {data}", err=True)


class _Created:
    """What a ``broker start`` creates at ``path``, to remove it (and only it) when the start
    fails: the highest missing directory on the way to ``path`` (``made``, when known), else the
    entries the start adds to the existing directory ``path``. The error quotes the broker's log
    first, so nothing it says is lost."""

    def __init__(self, path: Path, made: Path | None = None) -> None:
        self.path = path
        self.made = made
        self.before: set[str] | None = None
        if made is None:
            missing = [p for p in (path, *path.parents) if not p.exists()]
            if missing:
                self.made = missing[-1]
            elif path.is_dir():
                self.before = {entry.name for entry in path.iterdir()}

    def remove(self) -> None:
        if self.made is not None:
            shutil.rmtree(self.made, ignore_errors=True)
            return
        if self.before is None:
            return
        with contextlib.suppress(OSError):
            for entry in self.path.iterdir():
                if entry.name in self.before:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)


def _print_started(info: broker_mod.BrokerInfo) -> None:
    """The bootstrap address, then (a secured broker) one ``user: client file`` line per user."""
    typer.echo(info.bootstrap)
    for user, path in info.client_configs.items():
        typer.echo(f"{user}: {path}")


@broker_app.command("stop")
def broker_stop() -> None:
    """Stop the broker that `laneway broker start` started (and only that one). Its data
    directory is removed when it is under the cache (no --data-dir); a --data-dir elsewhere is kept.

    Example: laneway broker stop
    """
    state = _state_file()
    info = broker_mod.BrokerInfo.load(state)
    if info is None or not broker_mod.stop_recorded(info):
        typer.secho("no broker started by laneway is running", err=True)
    else:
        typer.echo(f"stopped broker pid {info.pid} at {info.bootstrap}")
        if Path(info.data_dir).resolve().is_relative_to(state.parent.resolve()):  # made by start
            shutil.rmtree(info.data_dir, ignore_errors=True)
    state.unlink(missing_ok=True)


@broker_app.command("status")
def broker_status(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print only the bootstrap address")] = False,
) -> None:
    """Print the running broker's bootstrap address; exit 1 when none runs.

    Example: export LANEWAY_BOOTSTRAP=$(laneway broker status --quiet)
    """
    info = broker_mod.BrokerInfo.load(_state_file())
    if (
        info is None
        or not info.alive()
        or not broker_mod.wait_for_metadata(info.bootstrap, 5.0, config=_admin(info))
    ):
        if not quiet:
            typer.secho("no broker started by laneway is running", err=True)
        raise typer.Exit(1)
    typer.echo(
        info.bootstrap if quiet else f"running: {info.bootstrap} (pid {info.pid}, data {info.data_dir})"
    )
    if not quiet:
        for user, path in info.client_configs.items():
            typer.echo(f"{user}: {path}")


def _admin(info: broker_mod.BrokerInfo) -> dict[str, str] | None:
    """A secured broker's admin settings (from its client file), for the liveness probe."""
    if "admin" not in info.client_configs:
        return None
    from laneway.ops.secured import read_properties

    try:
        return read_properties(Path(info.client_configs["admin"]))
    except OSError:
        return None


# Each module adds its commands to the root app through ``register(app)``; they
# import their heavy dependencies (pyspark, the engine) inside the commands.
_SUBCOMMAND_MODULES = (
    "laneway.ops.run_cli",
    "laneway.ops.kafka_cli",
    "laneway.ops.catalog_cli",
    "laneway.ops.spark_cli",
    "laneway.ops.top_cli",
)


def _register_subcommands() -> None:
    """Add the other modules' commands, then make every help page's prose wrap at the terminal's
    width (:func:`laneway.ops.help_text.reflow_app`)."""
    for name in _SUBCOMMAND_MODULES:
        importlib.import_module(name).register(app)
    reflow_app(app)


def main() -> None:
    _register_subcommands()
    try:
        app(prog_name="laneway")
    except ConfigError as exc:  # refused outside any command's own handling (an empty $LANEWAY_CACHE)
        raise SystemExit(fail(str(exc)).exit_code) from None


if __name__ == "__main__":
    main()
