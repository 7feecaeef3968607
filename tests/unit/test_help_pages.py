"""Every ``--help`` page reads well at 80 columns.

Rich keeps a docstring's single line breaks, so a paragraph written at the source's line length
broke mid-sentence at 80 columns ("(retention.ms,\\nsegment.bytes,\\ncleanup.policy)"), and the
commands' list did the same with each first paragraph. The rules checked, for the description
of every command and group and for each row of a group's command list:

* a line ends only where the next word would not fit (the width rich had: 78 columns for the
  description, the text column for a row): no line is cut short mid-sentence;
* the words are the help text's, in order, none cut in two or lost (to markup), and its
  paragraphs stay apart (one blank line each);
* an ``Example:`` paragraph is one line: a command cut in two cannot be copied.
"""

from __future__ import annotations

import inspect
import itertools
import re
from typing import Any

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from laneway.ops import cli
from laneway.ops.help_text import reflow

WIDTH = 80
TEXT = WIDTH - 2  # rich pads the description one column each side


def _root() -> Any:
    if not any(g.name == "pipeline" for g in cli.app.registered_groups):
        cli._register_subcommands()
    return typer.main.get_command(cli.app)


def _paths() -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []

    def walk(command: Any, path: tuple[str, ...]) -> None:
        out.append(path)
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                walk(sub, (*path, name))

    walk(_root(), ())
    return out


def _command(path: tuple[str, ...]) -> Any:
    command = _root()
    for name in path:
        command = command.commands[name]
    return command


def _page(path: tuple[str, ...]) -> list[str]:
    result = CliRunner().invoke(cli.app, [*path, "--help"], env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def _description(lines: list[str]) -> list[list[str]]:
    """The paragraphs between the usage line and the first panel, each a list of lines."""
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("Usage:")) + 1
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:]:
        if line.startswith("╭"):
            break
        text = line.strip()
        if text:
            assert line.startswith(" ") and not line.startswith("  "), f"not at the margin: {line!r}"
            paragraphs[-1].append(text)
        elif paragraphs[-1]:
            paragraphs.append([])
    return [p for p in paragraphs if p]


def _words(text: str) -> list[str]:
    return text.split()


def _cut_short(lines: list[str], width: int) -> list[str]:
    """The lines that end although the next line's first word would have fit after them."""
    return [a for a, b in itertools.pairwise(lines) if len(a) + 1 + len(b.split()[0]) <= width]


def _help(path: tuple[str, ...]) -> str:
    return inspect.cleandoc(_command(path).help or "").partition("\f")[0]


PATHS = _paths()


def test_every_command_is_checked() -> None:
    assert len(PATHS) > 20 and ("topics", "create") in PATHS and ("broker", "start") in PATHS


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "laneway")
def test_the_description_wraps_only_at_the_width(path: tuple[str, ...]) -> None:
    paragraphs = _description(_page(path))
    source = [p for p in _help(path).split("\n\n") if p.strip()]
    assert [_words(" ".join(p)) for p in paragraphs] == [_words(p) for p in source]
    for lines in paragraphs:
        assert all(len(line) <= TEXT for line in lines), lines
        assert _cut_short(lines, TEXT) == [], f"a line cut short mid-sentence in {lines}"
        if lines[0].startswith("Example:"):
            assert len(lines) == 1, f"an example cut in two: {lines}"


@pytest.mark.parametrize(
    "path", [p for p in PATHS if isinstance(_command(p), TyperGroup)], ids=lambda p: " ".join(p) or "laneway"
)
def test_the_command_list_wraps_only_at_the_width(path: tuple[str, ...]) -> None:
    lines = _page(path)
    start = next(i for i, line in enumerate(lines) if line.startswith("╭─ Commands "))
    rows: dict[str, list[str]] = {}
    column = width = 0
    for line in lines[start + 1 :]:
        if line.startswith("╰"):
            break
        inner = line[1:-1]
        if not column:
            first = re.match(r" \S+\s+", inner)
            assert first is not None, line
            column, width = first.end(), len(inner) - 1 - first.end()
        name, text = inner[:column].strip(), inner[column:].rstrip()
        if name:
            rows[name] = []
        rows[list(rows)[-1]].append(text)
    group = _command(path)
    assert set(rows) == set(group.commands)
    for name, texts in rows.items():
        first_paragraph = inspect.cleandoc(group.commands[name].help or "").split("\n\n")[0]
        assert _words(" ".join(texts)) == _words(first_paragraph), name
        assert _cut_short(texts, width) == [], f"{name}: a line cut short mid-sentence in {texts}"


@pytest.mark.parametrize(
    ("text", "flowed"),
    [
        ("One line.", "One line."),
        ("A paragraph\n    on two lines.\n\n    Another.", "A paragraph on two lines.\n\nAnother."),
        (
            "Three\n\n\n\nparagraphs,\n\n  one   blank\n  line apart.",
            "Three\n\nparagraphs,\n\none blank line apart.",
        ),
        ("Help.\n\f\nNot help: click leaves it out.", "Help."),
    ],
)
def test_reflow(text: str, flowed: str) -> None:
    assert reflow(text) == flowed
    assert reflow(flowed) == flowed
