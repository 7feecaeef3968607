"""The command lines' ``--bootstrap`` option and how it resolves.

``--bootstrap``/``-b``, else ``$LANEWAY_BOOTSTRAP``, else the broker ``laneway broker start``
recorded (while it runs), else 127.0.0.1:9092.

    address = resolve_bootstrap(bootstrap)   # bootstrap: the option's value, None when not given
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from laneway import jars
from laneway.ops.broker import BrokerInfo

__all__ = ["DEFAULT_BOOTSTRAP", "Bootstrap", "resolve_bootstrap"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

Bootstrap = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        "-b",
        help="Kafka bootstrap (default: $LANEWAY_BOOTSTRAP, else `laneway broker`'s, else 127.0.0.1:9092)",
        show_default=False,
    ),
]


def resolve_bootstrap(explicit: str | None) -> str:
    """``explicit``, else ``$LANEWAY_BOOTSTRAP``, else the broker ``laneway broker start`` recorded,
    else 127.0.0.1:9092."""
    if explicit:
        return explicit
    env = os.environ.get("LANEWAY_BOOTSTRAP")
    if env:
        return env
    info = BrokerInfo.load(jars.cache_dir() / "broker" / "state.json")
    if info is not None and info.alive():
        return info.bootstrap
    return DEFAULT_BOOTSTRAP
