"""A classic group member's session: how long a member that stopped without leaving holds its
partitions.

A member that stops without leaving its group (``kill -9``, a crash) holds its partitions until
its session times out, and the group's rebalances wait for it meanwhile. So do the other
members' commits and leaves: their requests queue behind their JoinGroup at the broker, which
answers it only once the rebalance completes. At librdkafka's 45 s, an instance stopped during
such a rebalance (a replacement joined after a replica's crash) could not commit before its
stop gave up (20 s, exit 1, no final commit; a review). Laneway's consumers take a 10 s session,
with heartbeats every 3 s (librdkafka's), unless ``kafka_config`` sets the session (a heartbeat
of its own keeps the 10 s session when it is shorter). Heartbeats come
from librdkafka's own thread, so a busy handler does not miss them; ``max.poll.interval.ms``
bounds a consumer loop that stops polling. Under ``group.protocol=consumer`` the broker sets
the session (``group.consumer.session.timeout.ms``), and the client sets none. A broker whose
``group.min.session.timeout.ms`` is above 10 s refuses the default at every join: the first
such refusal stops the app with one line naming ``session.timeout.ms`` (:func:`session_refused`),
where it retried for good without a partition (a review).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from laneway.errors import ConfigError

__all__ = ["HEARTBEAT_MS", "SESSION_TIMEOUT_MS", "group_defaults", "session_refused"]

#: a classic group member's session (ms), unless ``kafka_config`` sets one
SESSION_TIMEOUT_MS: Final = 10_000
#: its heartbeats (ms): librdkafka's default, a third of the session
HEARTBEAT_MS: Final = 3_000


def group_defaults(config: Mapping[str, Any]) -> dict[str, Any]:
    """The group settings a consumer of ``config`` gets under ``config``'s own: in a classic
    group the cooperative-sticky assignor and the session (the heartbeats too unless ``config``
    sets them; nothing of the session when ``config`` sets ``session.timeout.ms``, or a
    heartbeat too slow for it); under ``group.protocol=consumer`` none, as librdkafka refuses
    the client's assignor and session there (the broker sets them)."""
    if str(config.get("group.protocol", "classic")).lower() == "consumer":
        return {}
    out: dict[str, Any] = {"partition.assignment.strategy": "cooperative-sticky"}
    if "session.timeout.ms" in config:
        return out
    heartbeat = config.get("heartbeat.interval.ms")
    if heartbeat is None:
        return {**out, "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS}
    try:
        fits = int(heartbeat) < SESSION_TIMEOUT_MS
    except (TypeError, ValueError):  # librdkafka's check says what is wrong with it
        fits = False
    return {**out, "session.timeout.ms": SESSION_TIMEOUT_MS} if fits else out


def session_refused(session: tuple[Any, bool]) -> ConfigError:
    """The error that stops a consumer whose group session the broker refused
    (``INVALID_SESSION_TIMEOUT``: outside its ``group.min.session.timeout.ms`` and
    ``group.max.session.timeout.ms``). ``session``: the session asked for (ms, None for
    librdkafka's own) and whether it is Laneway's default."""
    ms, default = session
    asked = f"session.timeout.ms={ms}" if ms is not None else "librdkafka's session.timeout.ms (45000)"
    if default and ms is not None:
        asked += " (Laneway's default)"
    return ConfigError(
        "kafka_config",
        f"the broker refused the group session, {asked}: it is outside the broker's "
        "group.min.session.timeout.ms and group.max.session.timeout.ms (INVALID_SESSION_TIMEOUT); "
        "set session.timeout.ms within them in kafka_config",
    )
