"""docs/configuration.md against the code: every option of App, of the handler and of each
policy object is in its table with the default the code has, and nothing else is."""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from laneway import App, Backpressure, Delay, ExactlyOnce, MetricsServer, Retry, Timeouts, Tracing
from laneway.settings import DEPRECATED_KEYWORDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
REQUIRED = object()


def _tables() -> dict[str, list[list[str]]]:
    """The rows of each section's table (``## `Name` ``), header and separator left out."""
    tables: dict[str, list[list[str]]] = {}
    section = ""
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip().strip("`")
            tables[section] = []
        elif line.startswith("|") and section:
            # a cell's ``\|`` is a pipe within it (GitHub's tables), as in `bytes \| None`
            row = re.split(r"(?<!\\)\|", line.strip().strip("|"))
            cells = [c.strip().replace("\\|", "|") for c in row]
            if set(cells[0]) <= {"-"} or cells[0] in ("Option", "Keyword", "Field"):
                continue
            tables[section].append(cells)
    return tables


def _documented(section: str) -> dict[str, Any]:
    """Option -> default, as the doc writes them (``required`` or a Python expression)."""
    rows = _tables()[section]
    out: dict[str, Any] = {}
    for name, default, _meaning in rows:
        assert name.startswith("`") and name.endswith("`"), name
        if default == "required":
            out[name.strip("`")] = REQUIRED
        else:
            expr = default.strip("`")
            out[name.strip("`")] = eval(expr, {"__builtins__": {}}, {"Exception": Exception})
    return out


def _signature(fn: Callable[..., Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters.values()
    return {
        p.name: REQUIRED if p.default is inspect.Parameter.empty else p.default
        for p in params
        if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    }


def _fields(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = REQUIRED
    return out


@pytest.mark.parametrize(
    ("section", "options"),
    [
        ("App", lambda: _signature(App.__init__)),
        ("@app.handler", lambda: _signature(App.handler)),
        ("Backpressure", lambda: _fields(Backpressure)),
        ("Timeouts", lambda: _fields(Timeouts)),
        ("MetricsServer", lambda: _fields(MetricsServer)),
        ("ExactlyOnce", lambda: _fields(ExactlyOnce)),
        ("Tracing", lambda: _fields(Tracing)),
        ("Retry", lambda: _fields(Retry)),
        ("Delay", lambda: _fields(Delay)),
    ],
)
def test_each_table_lists_the_options_with_their_defaults(
    section: str, options: Callable[[], dict[str, Any]]
) -> None:
    documented, actual = _documented(section), options()
    assert list(documented) == list(actual)  # the same options, in the signature's order
    for name, default in actual.items():
        if default is REQUIRED:
            assert documented[name] is REQUIRED, name
        else:
            assert documented[name] == default and type(documented[name]) is type(default), name


def test_the_replaced_keywords_table_matches_the_code() -> None:
    rows = _tables()["Keywords replaced by policy objects"]
    assert {name.strip("`"): new.strip("`") for name, new in rows} == DEPRECATED_KEYWORDS


def test_every_table_is_checked() -> None:
    assert set(_tables()) == {
        "App",
        "@app.handler",
        "Backpressure",
        "Timeouts",
        "MetricsServer",
        "ExactlyOnce",
        "Tracing",
        "Retry",
        "Delay",
        "Event",
        "Command lines",
        "Keywords replaced by policy objects",
    }


#: the Event's fields the engine keeps for itself: the doc names them as not for handlers
ENGINE_FIELDS = ("size", "first_failure", "last_failure", "outputs")


def test_the_event_table_lists_the_handler_fields() -> None:
    """A user guessed ``event.timestamp`` (it is ``timestamp_ms``): the table lists every field of
    the handler's argument but the engine's own, which the doc names below it."""
    from laneway.engine.events import Event

    documented = {name.strip("`") for name, _type, _meaning in _tables()["Event"]}
    assert documented == {f.name for f in dataclasses.fields(Event)} - set(ENGINE_FIELDS)
    text = DOC.read_text()
    assert ", ".join(f"`{f}`" for f in ENGINE_FIELDS[:-1]) + f" and `{ENGINE_FIELDS[-1]}`" in text
    assert "`event.emit(topic, value, key=None, headers=None)`" in text
    assert list(inspect.signature(Event.emit).parameters) == ["self", "topic", "value", "key", "headers"]


def test_the_event_table_gives_each_fields_type_as_the_dataclass_does() -> None:
    """A header's value may be None (Kafka allows it; confluent-kafka gives None): the table
    said ``list[tuple[str, bytes]]``. Each type cell, its ``or`` read as ``|``, is the field's
    annotation."""
    from laneway.engine.events import Event

    annotations = {f.name: str(f.type) for f in dataclasses.fields(Event)}
    for name, type_, _meaning in _tables()["Event"]:
        assert type_.replace("`", "").replace(" or ", " | ") == annotations[name.strip("`")], name


def test_the_command_line_table_matches_the_code() -> None:
    """The connection options and their variables, as the shared option of the commands has them."""
    from typing import get_args

    from laneway.kafka.client_config import ENV_VAR
    from laneway.ops.bootstrap import Bootstrap, ClientConfig

    def long_name(option: Any) -> str:  # with Annotated, typer takes the first name as `default`
        return next(d for d in (option.default, *option.param_decls) if str(d).startswith("--"))

    rows = {name.strip("`"): env.strip("`") for name, env, _ in _tables()["Command lines"]}
    bootstrap, client = get_args(Bootstrap)[1], get_args(ClientConfig)[1]
    assert client.envvar == ENV_VAR
    assert rows == {long_name(bootstrap): "LANEWAY_BOOTSTRAP", long_name(client): ENV_VAR}


def test_the_example_runs() -> None:
    example = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert example is not None
    namespace: dict[str, Any] = {}
    exec(example.group(1), namespace)
    assert namespace["app"].settings.timeouts == Timeouts(commit_interval=0.5, shutdown=60)
