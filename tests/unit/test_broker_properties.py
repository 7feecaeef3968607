"""``LocalBroker(properties=...)``: settings over the launcher's defaults reach the broker's
``server.properties`` as lines after them (the last line of a key wins), and a line break in one
is refused before any Java starts (it would add a setting nobody asked for)."""

from __future__ import annotations

from pathlib import Path

import pytest

from laneway.ops.broker import BrokerError, LocalBroker


def test_properties_come_after_the_defaults(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path, properties={"transaction.max.timeout.ms": "20000", "num.io.threads": "2"})
    lines = broker._properties(tmp_path / "logs").splitlines()
    assert lines[-2:] == ["transaction.max.timeout.ms=20000", "num.io.threads=2"]
    assert "num.io.threads=4" in lines  # the default, overridden by the later line
    plain = LocalBroker(tmp_path, port=broker.port)
    plain.controller_port = broker.controller_port
    assert plain._properties(tmp_path / "logs").splitlines() == lines[:-2]


@pytest.mark.parametrize(
    "properties", [{"log.retention.hours": "1\nauto.create.topics.enable=true"}, {"a\rb": "1"}]
)
def test_a_line_break_in_a_property_is_refused(tmp_path: Path, properties: dict[str, str]) -> None:
    with pytest.raises(BrokerError, match="a line break cannot be in a setting"):
        LocalBroker(tmp_path, properties=properties)._properties(tmp_path / "logs")
