"""What a redrive (:mod:`laneway.kafka.redrive`) reports: the letters it moved (or, in a dry
run, would move), the ones it skipped, and whether a stop ended it; and its error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from laneway.kafka.admin import AdminError
from laneway.kafka.dlq_reader import DeadLetter, LedgerEntry, Progress

__all__ = ["Moved", "Reading", "RedriveError", "RedriveReport"]


class RedriveError(AdminError):
    """A redrive could not be done, or could not go on. ``recorded``: how many letters it moved
    and recorded before it stopped (a fenced run, a letter refused mid-way), None when it
    stopped before sending anything."""

    def __init__(self, message: str, *, recorded: int | None = None) -> None:
        super().__init__(message)
        self.recorded = recorded


@dataclass(frozen=True)
class Moved:
    dlq_partition: int
    dlq_offset: int
    target_topic: str
    #: where the record landed; in a dry run the planned partition when known, else None
    target_partition: int | None = None
    target_offset: int | None = None


@dataclass(frozen=True)
class RedriveReport:
    redrive_id: str
    dlq_topic: str
    dry_run: bool
    moved: tuple[Moved, ...]
    #: records an earlier redrive already moved, with the ledger entry (of the letter itself, or
    #: of another letter of the same origin)
    skipped: tuple[tuple[DeadLetter, LedgerEntry], ...]
    #: letters of a record this redrive moves from another letter, each with that letter
    repeats: tuple[tuple[DeadLetter, DeadLetter], ...] = ()
    #: a stop ended it early: ``moved`` is what it moved and recorded before
    interrupted: bool = False
    #: the letters it chose and did not move (interrupted); None when it stopped before it chose
    #: them (while it read the ledger or the dead-letter topic)
    left: int | None = 0
    #: the letters read from the dead-letter topic, and of them those its filters matched
    #: (None when the redrive stopped before it had read them)
    read: int | None = None
    matched: int | None = None


#: called with each topic a redrive reads before it moves anything (its ledger, the dead-letter
#: topic), it gives the progress callback of that read
Reading = Callable[[str], Progress | None]
