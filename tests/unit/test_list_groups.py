"""``laneway groups`` on a cluster where a group cannot be read: the others are listed, and the
unreadable one says why (a review: one such group failed the whole command)."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from laneway.kafka import groups as g
from laneway.kafka.access import Ask, KafkaAccessDenied


def _listed(*ids: str) -> Future[Any]:
    f: Future[Any] = Future()
    f.set_result(SimpleNamespace(valid=[SimpleNamespace(group_id=i) for i in ids]))
    return f


def test_a_group_that_cannot_be_read_is_a_row_with_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def state(admin: object, group: str, **_: object) -> g.GroupState:
        if group == "hidden":
            raise KafkaAccessDenied("access", f"{Ask('describe', 'group', group, 'Describe')} was denied")
        committed = {("orders", 0): 7, ("orders", 1): 3}
        return g.GroupState(group, "stable", 2, (("orders", 0),), committed, {("orders", 0): 2})

    monkeypatch.setattr(g, "group_state", state)
    monkeypatch.setattr(g, "_other_partitions", lambda admin, topics: {("orders", 0), ("orders", 1)})
    monkeypatch.setattr(g, "watermarks", lambda admin, tps: {("orders", 0): (0, 10), ("orders", 1): (0, 5)})
    admin: Any = SimpleNamespace(list_consumer_groups=lambda: _listed("orders-app", "hidden"))
    rows = {r.group: r for r in g.list_groups(admin)}
    assert rows["orders-app"] == g.GroupSummary("orders-app", "stable", 2, ("orders",), 5, 2)
    hidden = rows["hidden"]
    assert (hidden.lag, hidden.finished_beyond) == (None, None)
    assert hidden.error is not None and "describe group 'hidden'" in hidden.error
