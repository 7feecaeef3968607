"""The ``--log-level`` option of the commands that run for a while and log as they go:
``laneway run``, ``laneway catalog sync`` and ``laneway pipeline run``.

    def sync(log_level: LogLevel = "INFO") -> None:
        setup_logging(log_level)   # an unknown level: one line on stderr, exit code 2
"""

from __future__ import annotations

import logging
from typing import Annotated, Final

import typer

from laneway.app import LOG_FORMAT

__all__ = ["FORMAT", "LogLevel", "setup_logging"]

#: the log lines' format on stderr
FORMAT: Final = LOG_FORMAT

LogLevel = Annotated[str, typer.Option(help="the level of its log lines: DEBUG, INFO, WARNING, ERROR")]


def setup_logging(level: str) -> None:
    """Log to stderr at ``level`` (any case); an unknown level is one ``error:`` line, exit code 2."""
    if not isinstance(logging.getLevelName(level.upper()), int):
        typer.secho(
            f"error: --log-level: unknown level {level!r} (DEBUG, INFO, WARNING, ERROR)",
            err=True,
            fg=typer.colors.RED,
        )
        raise typer.Exit(2)
    logging.basicConfig(level=level.upper(), format=FORMAT)
