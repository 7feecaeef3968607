"""A simulated metadata source: the system a catalog fetches full metadata from.

Real catalogs receive thin change notifications and call back into the metastore (Hive,
Glue, Unity...) for the entity's full metadata. :class:`SimulatedSource` stands in for
that call: it answers after a variable latency (log-normal, with a long tail), and now and
then fails with :class:`SourceUnavailable`, a transient error the caller should retry.

What it returns is a pure function of ``(entity_type, entity_id, version)``
(:func:`source_attributes`), so the final catalog state can be computed independently of
the pipeline that fetched it. A given request never fails more than
``max_failures_per_request`` times in a row, so a retry policy with more attempts than
that always gets through.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from laneway.catalog.models import CatalogError

__all__ = [
    "SOURCE_PREFIX",
    "SimulatedSource",
    "SourceError",
    "SourceUnavailable",
    "source_attributes",
]

logger = logging.getLogger(__name__)

#: every attribute the source adds starts with this prefix
SOURCE_PREFIX = "source."

_FORMATS = ("delta", "parquet", "iceberg", "orc")


class SourceError(CatalogError):
    """Root of the source's errors.

    SourceError
    └── SourceUnavailable   transient: the source timed out or was briefly down; retry
    """


class SourceUnavailable(SourceError):
    """The source failed transiently; the same request may succeed when retried."""

    def __init__(self, entity_id: str, version: int, attempt: int) -> None:
        super().__init__(f"metadata source unavailable for {entity_id}@{version} (failure {attempt})")
        self.entity_id = entity_id
        self.version = version
        self.attempt = attempt


def _digest(entity_id: str, version: int) -> str:
    return hashlib.blake2b(f"{entity_id}@{version}".encode(), digest_size=8).hexdigest()


def source_attributes(entity_type: str, entity_id: str, version: int) -> dict[str, str]:
    """The metadata the source holds for one version of an entity (deterministic).

    ``source.etag`` identifies the version fetched, so a snapshot built from a stale
    fetch is visible as a mismatch.
    """
    etag = _digest(entity_id, version)
    attrs = {f"{SOURCE_PREFIX}system": "metastore", f"{SOURCE_PREFIX}etag": etag}
    if entity_type == "table":
        name = entity_id.split(":", 1)[1]
        attrs[f"{SOURCE_PREFIX}location"] = "s3://warehouse/" + name.replace(".", "/")
        attrs[f"{SOURCE_PREFIX}format"] = _FORMATS[int(etag[:2], 16) % len(_FORMATS)]
    elif entity_type == "column":
        attrs[f"{SOURCE_PREFIX}stats_rows"] = str(int(etag[:6], 16))
    return attrs


@dataclass
class SimulatedSource:
    """A metastore client with variable latency and occasional transient failures.

    ``median_latency`` and ``tail`` (the log-normal sigma) shape the latency in seconds;
    ``failure_rate`` is the chance a call fails. Thread-safe: one instance serves every
    lane of the sync app.
    """

    median_latency: float = 0.002
    tail: float = 0.8
    failure_rate: float = 0.02
    max_failures_per_request: int = 2
    seed: int | None = None
    sleep: Callable[[float], None] = time.sleep
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)
    _failures: dict[tuple[str, int], int] = field(init=False, repr=False, default_factory=dict)
    calls: int = field(init=False, default=0)
    failures: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if self.median_latency < 0 or self.tail < 0:
            raise ValueError("median_latency and tail must be >= 0")
        if not 0.0 <= self.failure_rate < 1.0:
            raise ValueError("failure_rate must be in [0, 1)")
        if self.max_failures_per_request < 0:
            raise ValueError("max_failures_per_request must be >= 0")
        self._rng = random.Random(self.seed)

    def fetch(self, entity_type: str, entity_id: str, version: int) -> dict[str, str]:
        """Fetch one version's metadata; may raise :class:`SourceUnavailable`."""
        request = (entity_id, version)
        with self._lock:
            self.calls += 1
            delay = (
                self.median_latency * math.exp(self.tail * self._rng.gauss(0.0, 1.0))
                if self.median_latency
                else 0.0
            )
            failed = self._failures.get(request, 0)
            fail = failed < self.max_failures_per_request and self._rng.random() < self.failure_rate
            if fail:
                self._failures[request] = failed + 1
                self.failures += 1
            else:
                self._failures.pop(request, None)
        if delay:
            self.sleep(delay)
        if fail:
            logger.debug("source failure for %s@%d", entity_id, version)
            raise SourceUnavailable(entity_id, version, failed + 1)
        return source_attributes(entity_type, entity_id, version)
