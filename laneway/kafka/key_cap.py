"""The partitions a consumer pauses for a hot key, said in the log as they pause and resume.

A key holding more than ``max_key_share`` of the event cap pauses its partition
(:func:`laneway.engine.flow.intake`): the partition's other keys then wait too. Without a word,
an operator sees a partition that stopped fetching and cannot tell why. :class:`KeyCapPauses`
logs a line when a partition pauses for its key (the key, what it holds, the cap) and when the
key is down to where its partition may fetch again, at most :data:`BURST` per partition every
:data:`WINDOW` seconds, then a count (a key that flaps around its cap would fill the log: a
review saw ten lines every 10 s), and gives each paused partition's reason for ``/status``.

Threads: the consumer's own loop calls :meth:`see`; :meth:`reasons` may be read from any thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Set

from laneway.engine.sampled import Sampled

__all__ = ["KeyCapPauses", "key_for_people"]

logger = logging.getLogger("laneway.kafka.source")

Partition = tuple[str, int]

#: a partition's pause and resume lines for hot keys, per window (s): the first pause and its
#: resume, then one count per window
BURST, WINDOW = 2, 60.0


def key_for_people(key: bytes | None, limit: int = 64) -> str:
    """A key for a log line, quoted: its text where it is UTF-8, escaped where not or where it
    is not printable (it cannot start a line of its own), cut at ``limit`` characters."""
    if key is None:
        return "None"
    text = key.decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")  # repr escapes the rest


class KeyCapPauses:
    """Which of a consumer's partitions are paused for a key over the key cap (see the module)."""

    def __init__(self, cap: int, low: int, max_key_share: float, who: str = "") -> None:
        #: over ``cap`` events a key pauses its partition; down to ``low`` it resumes
        self._cap, self._low, self._share, self._who = cap, low, max_key_share, who
        self.now: dict[Partition, bytes | None] = {}
        self._log = Sampled(
            logger,
            "%d more pause(s) or resume(s) of %s for a hot key in the last %.0fs, not logged one by one",
            level=logging.INFO,
            burst=BURST,
            window=WINDOW,
        )

    def see(self, hot: Mapping[Partition, tuple[bytes | None, int]], assigned: Set[Partition]) -> None:
        """This turn's hot partitions (each with its hottest key and the events it holds): a line
        for each that is new, and for each that is gone while still assigned."""
        now = self.now
        for tp, (key, held) in hot.items():
            if tp not in now:
                self._log.warning(
                    f"{tp[0]}[{tp[1]}]",
                    "%spaused %s[%d]: key %s holds %d events, over its cap of %d (max_key_share=%g "
                    "of max_events); the partition's other keys wait until it is down to %d",
                    self._who,
                    *tp,
                    key_for_people(key),
                    held,
                    self._cap,
                    self._share,
                    self._low,
                )
        gone = [tp for tp in now if tp not in hot]
        for tp in gone:
            if tp in assigned:
                self._log.warning(
                    f"{tp[0]}[{tp[1]}]",
                    "%s%s[%d] no longer waits for key %s: it is down to %d events or fewer",
                    self._who,
                    *tp,
                    key_for_people(now[tp]),
                    self._low,
                )
        if hot or now:
            self.now = {tp: key for tp, (key, _) in hot.items()}

    def reasons(self) -> dict[Partition, str]:
        """Per partition paused for a hot key: ``hot_key``."""
        return dict.fromkeys(self.now, "hot_key")
