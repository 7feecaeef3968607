"""The help pages' prose, for a terminal of any width.

typer draws ``--help`` with rich, which keeps a docstring's single line breaks: a paragraph
written at the source's line length broke where each source line ended, mid-sentence at 80
columns. :func:`reflow_app` joins each paragraph of every command's and group's help into one
line before typer builds the command line, so rich wraps it at the terminal's width; blank
lines still part the paragraphs.

    reflow("Create a topic.\\n\\nA --config KEY=VALUE may not set what\\nan option sets.")
    # 'Create a topic.\\n\\nA --config KEY=VALUE may not set what an option sets.'

Help is written so each ``Example:`` paragraph fits one line of 80 columns (a command cut in two
cannot be copied); ``tests/unit/test_help_pages.py`` checks both for every command.

typer draws the options in a table of columns: the name, the short name, a flag's ``--no-...``,
the type, the help. When they do not fit the terminal, rich narrows the widest columns to the
width of the next until they do: the help down to the names' width, then the names with it, so
``--max-offsets-per-batch`` showed as ``--max-offsets-per…`` at 80 columns. A long flag that is
off by default is declared alone, its ``--no-...`` still taken but not shown (:func:`off_switch`),
so its column stays empty; a long flag on by default is declared as its ``--no-...`` alone, the
same way. ``tests/unit/test_help_option_names.py`` checks every command.

    until_caught_up: Annotated[bool, typer.Option("--until-caught-up", help="...")] = False,
    no_until_caught_up: Annotated[bool, off_switch("until_caught_up")] = False,  # never read
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import typer

__all__ = ["off_switch", "reflow", "reflow_app"]


def off_switch(flag: str, name: str | None = None) -> Any:
    """The option ``--no-FLAG`` (``flag`` the parameter's name, ``_`` for ``-``) of a flag
    declared alone, hidden from ``--help``: given, it sets the flag's parameter to False, and the
    last of the two given wins, as with ``--FLAG/--no-FLAG`` (click processes options in the order
    given). Its own parameter is never passed to the command (it keeps its default).

    ``name`` names the option otherwise: the ``--progress`` that undoes a ``--no-progress``
    (parameter ``no_progress``) declared alone, for a flag on by default."""

    def switch_off(ctx: typer.Context, value: bool) -> None:
        if value:
            ctx.params[flag] = False

    return typer.Option(
        name or "--no-" + flag.replace("_", "-"), hidden=True, expose_value=False, callback=switch_off
    )


def reflow(text: str) -> str:
    """``text`` (a docstring) with each paragraph's lines joined by a space, the paragraphs one
    blank line apart (what follows a ``\\f`` line, which click leaves out of help, is dropped)."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(text.partition("\f")[0]))
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


def reflow_app(app: typer.Typer) -> None:
    """:func:`reflow` the help of ``app``, its commands and its groups, all the way down (in place;
    doing it twice changes nothing). A command's help is its docstring unless given."""
    if isinstance(app.info.help, str):
        app.info.help = reflow(app.info.help)
    for command in app.registered_commands:
        text = command.help if command.help is not None else inspect.getdoc(command.callback)
        if text:
            command.help = reflow(text)
    for group in app.registered_groups:
        if isinstance(group.help, str):
            group.help = reflow(group.help)
        if group.typer_instance is not None:
            reflow_app(group.typer_instance)
