"""A classic group member's session: how long a member that stopped without leaving holds its
partitions.

A member that stops without leaving its group (``kill -9``, a crash) holds its partitions until
its session times out, and the group's rebalances wait for it meanwhile. So do the other
members' commits and leaves: their requests queue behind their JoinGroup at the broker, which
answers it only once the rebalance completes. At librdkafka's 45 s, an instance stopped during
such a rebalance (a replacement joined after a replica's crash) could not commit before its
stop gave up (20 s, exit 1, no final commit; a review). Laneway's consumers take a 10 s session,
with heartbeats every 3 s (librdkafka's), unless ``kafka_config`` sets either. Heartbeats come
from librdkafka's own thread, so a busy handler does not miss them; ``max.poll.interval.ms``
bounds a consumer loop that stops polling. Under ``group.protocol=consumer`` the broker sets
the session (``group.consumer.session.timeout.ms``), and the client sets none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["HEARTBEAT_MS", "SESSION_TIMEOUT_MS", "group_session"]

#: a classic group member's session (ms), unless ``kafka_config`` sets one
SESSION_TIMEOUT_MS: Final = 10_000
#: its heartbeats (ms): librdkafka's default, a third of the session
HEARTBEAT_MS: Final = 3_000


def group_session(config: Mapping[str, Any]) -> dict[str, int]:
    """The session settings a consumer of ``config`` gets: none when ``config`` sets its own
    (``session.timeout.ms`` or ``heartbeat.interval.ms``), or under ``group.protocol=consumer``."""
    if str(config.get("group.protocol", "classic")).lower() == "consumer":
        return {}
    if "session.timeout.ms" in config or "heartbeat.interval.ms" in config:
        return {}
    return {"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS}
