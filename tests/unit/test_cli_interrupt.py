"""A Ctrl-C that lands in the Kafka client's C code can surface as a ``SystemError`` ("returned
a result with an exception set") with the ``KeyboardInterrupt`` as its cause: the tools'
wrapper (:func:`laneway.ops.cli_common.tool_errors`) turns it back into the Ctrl-C it was, not
a 40-line traceback (a review: 1 in 25 Ctrl-C of ``laneway lag --watch``)."""

from __future__ import annotations

import pytest

from laneway.ops.cli_common import tool_errors


def test_a_system_error_caused_by_a_ctrl_c_is_the_ctrl_c() -> None:
    interrupt = KeyboardInterrupt()

    @tool_errors
    def command() -> None:
        raise SystemError("<function lag> returned a result with an exception set") from interrupt

    with pytest.raises(KeyboardInterrupt) as info:
        command()
    assert info.value is interrupt


def test_another_system_error_is_left_as_it_is() -> None:
    @tool_errors
    def command() -> None:
        raise SystemError("a bug") from ValueError("x")

    with pytest.raises(SystemError, match="a bug"):
        command()
