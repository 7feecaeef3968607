"""The dead letter's traceback text: the standard formatter's, without its caret lines."""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable

import pytest

from laneway.engine.outcomes import format_error


def _inner(x: int) -> None:
    raise ValueError(f"bad {x}")


def _caused() -> None:
    try:
        _inner(1)
    except ValueError as exc:
        raise RuntimeError("wrapped") from exc


def _during() -> None:
    try:
        _inner(2)
    except ValueError:
        raise KeyError("k")  # noqa: B904 (the implicit context is the case under test)


def _suppressed() -> None:
    try:
        _inner(3)
    except ValueError:
        raise KeyError("quiet") from None


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def _noted() -> None:
    exc = ValueError("with a note")
    exc.add_note("the note")
    raise exc


def _syntax() -> None:
    compile("x = (", "<handler>", "exec")


def _bare() -> None:
    raise KeyError


def _unprintable() -> None:
    raise _Unprintable


def _group() -> None:
    raise ExceptionGroup("two", [ValueError("a"), TypeError("b")])


def _standard(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "\n".join(line for line in text.split("\n") if not re.fullmatch(r"\s*[\^~]+\s*", line))


@pytest.mark.parametrize(
    "raiser", [lambda: _inner(0), _caused, _during, _suppressed, _noted, _bare, _unprintable]
)
def test_the_text_is_the_standard_formatters_without_carets(raiser: Callable[[], None]) -> None:
    with pytest.raises(Exception) as info:
        raiser()
    assert format_error(info.value) == _standard(info.value)
    assert "Traceback (most recent call last):" in format_error(info.value)


def test_a_syntax_error_keeps_the_standard_lines_that_point_into_its_source() -> None:
    with pytest.raises(SyntaxError) as info:
        _syntax()
    last = "".join(traceback.format_exception_only(SyntaxError, info.value))
    assert "^" in last and format_error(info.value).endswith(last)


def test_an_exception_group_takes_the_standard_formatter() -> None:
    with pytest.raises(ExceptionGroup) as info:
        _group()
    text = format_error(info.value)
    assert "ValueError: a" in text and "TypeError: b" in text


def test_an_exception_never_raised_has_no_traceback_only_its_line() -> None:
    assert format_error(ValueError("never raised")) == "ValueError: never raised\n"
