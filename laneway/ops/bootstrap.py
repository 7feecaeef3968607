"""The command lines' connection options: ``--bootstrap`` and ``--client-config``.

``--bootstrap``/``-b``, else ``$LANEWAY_BOOTSTRAP``, else the broker ``laneway broker start``
recorded (while it runs), else 127.0.0.1:9092. An empty ``--bootstrap ""``, and an empty
``$LANEWAY_BOOTSTRAP`` when it is read, exit 2: not taken as unset (another broker).

    address = resolve_bootstrap(bootstrap)   # bootstrap: the option's value, None when not given

``--client-config FILE``, else ``$LANEWAY_CLIENT_CONFIG``: a Java-style properties file of client
settings (:mod:`laneway.kafka.client_config`); an empty option, or an empty variable when it is
read, exits 2 as for ``--bootstrap``. :func:`with_client_config` adds the option to a command
and runs it with the file's settings in every client it builds; a file that cannot be read, and
a cluster that refuses the settings (:mod:`laneway.kafka.access`), are one line on stderr and
exit code 2. The file's ``bootstrap.servers`` (or ``metadata.broker.list``, read as it by
:func:`~laneway.kafka.client_config.load_client_config`) comes after ``--bootstrap`` and before
``$LANEWAY_BOOTSTRAP``.

    @app.command("lag")
    @with_client_config
    def lag(group: str, bootstrap: Bootstrap = None) -> None: ...
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from laneway import jars
from laneway.errors import ConfigError
from laneway.kafka import client_config as cc
from laneway.ops.broker import BrokerInfo

__all__ = ["DEFAULT_BOOTSTRAP", "Bootstrap", "ClientConfig", "resolve_bootstrap", "with_client_config"]

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

ENV_VAR = "LANEWAY_BOOTSTRAP"


def refuse_empty_option(value: str | None, option: str, *, give: str, then: str) -> str | None:
    """``value``, an option's; an empty one (or blanks) exits 2 before the command does anything:
    taken as unset, the command went on without it and without a word. ``give`` says what to
    give instead, ``then`` what is used when the option is left out."""
    if value is not None and not value.strip():
        raise _fail(f"{option}: must not be empty: give {give}, or leave the option out (then {then})")
    return value


def refuse_empty_variable(name: str, *, give: str, then: str) -> None:
    """A variable set but empty (or blanks) exits 2 where it would be read: the command line
    takes it as unset, and the command went on without it."""
    value = os.environ.get(name)
    if value is not None and not value.strip():
        raise _fail(f"{name} is set but empty: set it to {give}, or unset it (then {then})")


_BOOTSTRAP_THEN = f"`laneway broker`'s, then {DEFAULT_BOOTSTRAP}"


def _given(value: str | None) -> str | None:
    """``--bootstrap``'s callback: an empty one exits 2 (it was taken as unset, and the command
    went to another broker without a word)."""
    return refuse_empty_option(
        value,
        "--bootstrap",
        give="host:port",
        then=f"the --client-config file's bootstrap.servers, then ${ENV_VAR}, then {_BOOTSTRAP_THEN}",
    )


Bootstrap = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        "-b",
        help=(
            "Kafka bootstrap (default: the --client-config file's bootstrap.servers, then "
            "$LANEWAY_BOOTSTRAP, then `laneway broker`'s, then 127.0.0.1:9092)"
        ),
        show_default=False,
        callback=_given,
        is_eager=True,  # refused before a missing argument or another option is complained of
    ),
]


def resolve_bootstrap(explicit: str | None) -> str:
    """``explicit``, else ``$LANEWAY_BOOTSTRAP``, else the broker ``laneway broker start`` recorded,
    else 127.0.0.1:9092. An empty ``explicit`` or ``$LANEWAY_BOOTSTRAP`` is refused (exit 2),
    as the warehouse's variable is: taken as unset, it would name another broker."""
    if explicit is not None:
        _given(explicit)
        return explicit
    refuse_empty_variable(ENV_VAR, give="host:port", then=_BOOTSTRAP_THEN)
    env = os.environ.get(ENV_VAR)
    if env:
        return env
    info = BrokerInfo.load(jars.cache_dir() / "broker" / "state.json")
    if info is not None and info.alive():
        return info.bootstrap
    return DEFAULT_BOOTSTRAP


def _fail(message: str) -> typer.Exit:
    from laneway.ops.cli import fail

    return fail(message)


_CLIENT_CONFIG_GIVE = "the path of a properties file"


def _client_config_given(value: str | None) -> str | None:
    """``--client-config``'s callback, and the wrapper's check: an empty option, or (the option
    left out) an empty ``$LANEWAY_CLIENT_CONFIG``, exits 2. Both were taken as unset: the
    command ran without the settings, and ``--client-config ""`` dropped the variable's file."""
    if value is None:
        refuse_empty_variable(cc.ENV_VAR, give=_CLIENT_CONFIG_GIVE, then="no client settings")
    return refuse_empty_option(
        value, "--client-config", give=_CLIENT_CONFIG_GIVE, then=f"${cc.ENV_VAR}, then no client settings"
    )


ClientConfig = Annotated[
    str | None,
    typer.Option(
        "--client-config",
        envvar=cc.ENV_VAR,
        callback=_client_config_given,
        is_eager=True,  # as --bootstrap: refused before anything else is complained of
        show_envvar=True,
        show_default=False,  # the variable's value is never shown
        help="Kafka client settings: a Java-style properties file, as Kafka's tools take "
        "--command-config (SASL, TLS; docs/security.md)",
    ),
]


def with_client_config(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with a ``--client-config`` option: the file's settings go into every client the
    command builds (:func:`laneway.kafka.client_config.using`); the command reads them with
    :func:`laneway.kafka.client_config.active`. A bad file, or a cluster refusing the
    settings, is one line and exit code 2."""
    signature = inspect.signature(fn, eval_str=True)
    param = inspect.Parameter(
        "client_config", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ClientConfig
    )

    @functools.wraps(fn)
    def wrapper(*args: Any, client_config: str | None = None, **kwargs: Any) -> Any:
        from laneway.kafka.access import KafkaAccessError
        from laneway.ops.cli import fail

        _client_config_given(client_config)  # also when called without the command line
        try:
            settings = (
                cc.load_client_config(client_config, given_by=cc.CLI_OPTION)
                if client_config is not None
                else {}
            )
        except ConfigError as exc:
            raise fail(str(exc)) from None
        # the file's bootstrap.servers: after --bootstrap, before $LANEWAY_BOOTSTRAP
        server = settings.pop("bootstrap.servers", None)
        if server and "bootstrap" in signature.parameters and not kwargs.get("bootstrap"):
            kwargs["bootstrap"] = server
        try:
            with cc.using(settings):
                return fn(*args, **kwargs)
        except KafkaAccessError as exc:
            raise fail(str(exc)) from None

    wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), param]
    )
    wrapper.__annotations__ = {**{p.name: p.annotation for p in signature.parameters.values()}}
    wrapper.__annotations__["client_config"] = ClientConfig
    return wrapper  # type: ignore[return-value]
