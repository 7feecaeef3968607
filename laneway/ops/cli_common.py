"""What the ``laneway topics|lag|replay|dlq|health`` command lines share: the ``--json``
option, the decorator that turns the tools' errors into one line and exit code 2, the
console, connecting, JSON output, the progress bar and the table cells.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, ParamSpec, TypeVar

import orjson
import typer
from confluent_kafka import KafkaError, KafkaException
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from laneway.kafka import admin as ka
from laneway.kafka import dlq_reader as dr
from laneway.kafka.access import raise_if_denied
from laneway.kafka.client_config import active
from laneway.kafka.producer import ProducerError
from laneway.kafka.secrets import refusal_text
from laneway.ops.bootstrap import resolve_bootstrap

__all__ = [
    "Json",
    "age",
    "connect",
    "console",
    "echo_json",
    "fail",
    "opt",
    "progress_bar",
    "progress_stages",
    "tool_errors",
]

P = ParamSpec("P")
R = TypeVar("R")

Json = Annotated[bool, typer.Option("--json", help="print JSON for scripts instead of a table")]


def fail(message: str, code: int = 2) -> typer.Exit:
    from laneway.ops import cli

    return cli.fail(message, code)


def tool_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn the tools' errors into a one-line message and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        ka.client_logger.setLevel(logging.CRITICAL)  # connection noise: our message says it once
        try:
            return fn(*args, **kwargs)
        except (ka.AdminError, ProducerError) as exc:
            raise fail(str(exc)) from exc
        except KafkaException as exc:  # a request the tools did not wrap, e.g. a metadata timeout
            err = exc.args[0] if exc.args else exc
            if isinstance(err, KafkaError):  # an ACL denial or a refused login: say which setting
                raise_if_denied(err, active())
            raise fail(f"kafka: {refusal_text(exc, active())}") from exc
        except SystemError as exc:
            # a Ctrl-C that landed in the client's C code can surface as "<function> returned a
            # result with an exception set", its KeyboardInterrupt the cause (a review: 1 in 25
            # Ctrl-C of ``lag --watch``, 40 lines of traceback): it is the Ctrl-C it was
            if isinstance(exc.__cause__, KeyboardInterrupt):
                raise exc.__cause__ from None
            raise

    return wrapper


def console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=160)


def connect(bootstrap: str | None) -> tuple[str, Any]:
    address = resolve_bootstrap(bootstrap)
    return address, ka.connect(address)


def echo_json(data: Any) -> None:
    typer.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode())


@contextmanager
def progress_stages() -> Iterator[Callable[[str], dr.Progress]]:
    """Progress bars on stderr, one per stage of a long operation (reading a topic, then moving
    what was read, say): yields ``stage(label)``, which gives the callback of a bar labelled
    ``label``. A bar appears at its callback's first call, which brings its total, below the bars
    of the stages before it: no ``0/?`` bar waits while an earlier stage runs. Nothing is drawn
    when stderr is not a terminal (a pipe, a file, a test): no stray blank line there."""
    err = console(stderr=True)
    if not err.is_terminal:
        yield lambda label: lambda done, total: None
        return
    columns = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=err, transient=True) as bar:

        def stage(label: str) -> dr.Progress:
            task: TaskID | None = None

            def update(done: int, total: int) -> None:
                nonlocal task
                if task is None:
                    task = bar.add_task(label, total=total)
                bar.update(task, completed=done, total=total)

            return update

        yield stage


@contextmanager
def progress_bar(label: str) -> Iterator[dr.Progress]:
    """One bar of :func:`progress_stages`; yields the callback the long operations take."""
    with progress_stages() as stage:
        yield stage(label)


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def opt(value: int | None) -> str:
    return "-" if value is None else str(value)
