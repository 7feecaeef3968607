"""Closing a consumer's clients, and saying what went wrong while doing it.

A source whose start failed (a refused transactional id) closes what it opened and raises the
cause; its thread never ran, so nothing joins it. A source that halted on a refused grant logs
its final commit's and its close's failures in one line each: the halt's error already says
why, and a traceback per failure would bury it. Any other failure keeps its traceback."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from laneway.kafka.access import KafkaAccessError, as_access_error

__all__ = ["close_unstarted", "log_failure", "quietly"]

logger = logging.getLogger("laneway.kafka.source")


def log_failure(what: str, exc: BaseException, settings: Mapping[str, Any]) -> None:
    """Log ``what`` failed with ``exc``: one line for a refusal (an ACL, a login), with the
    traceback for anything else."""
    found = exc if isinstance(exc, KafkaAccessError) else as_access_error(exc, settings)
    if isinstance(found, KafkaAccessError):
        logger.error("%s: %s", what, found)
    else:
        logger.error("%s", what, exc_info=exc)


def quietly(close: Callable[[], object], what: str, settings: Mapping[str, Any] | None = None) -> None:
    """Call ``close``; a failure is logged (:func:`log_failure`), not raised: called while an
    earlier error is on its way up, it must not replace it."""
    try:
        close()
    except Exception as exc:
        log_failure(what, exc, settings or {})


def close_unstarted(consumer: Any, committer: Any, settings: Mapping[str, Any]) -> None:
    """After a failed start: close the committer's producer and the consumer (never subscribed,
    or subscribed with no thread to poll it), each failure logged, not raised."""
    quietly(committer.close, "closing the output producer after a failed start failed", settings)
    quietly(consumer.close, "closing the consumer after a failed start failed", settings)
