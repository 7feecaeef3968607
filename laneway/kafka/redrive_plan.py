"""Which dead letters a redrive (:mod:`laneway.kafka.redrive`) moves, and to which partition:
each record once, partition by partition and lowest offset first, without what the ledger
names; a letter another redrive moved since they were chosen (it, or another letter of its
record) is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from laneway.kafka import headers as h
from laneway.kafka.dlq_reader import DeadLetter, LedgerEntry, Origin

__all__ = ["choose", "planned_partition", "since"]


def planned_partition(letter: DeadLetter, target: str, partitions: dict[str, int]) -> int | None:
    """The original partition when ``letter`` goes back to its original topic and that topic
    still has it; None (the key-based partitioner chooses) otherwise."""
    if target != letter.original_topic:
        return None
    try:
        partition = int(letter.info.get(h.ORIGINAL_PARTITION, ""))
    except ValueError:
        return None
    return partition if 0 <= partition < partitions.get(target, 0) else None


def choose(
    letters: Sequence[DeadLetter],
    ledger: dict[str, LedgerEntry],
    recorded: dict[Origin, LedgerEntry],
    *,
    force: bool,
    limit: int | None,
) -> tuple[
    list[DeadLetter], tuple[tuple[DeadLetter, LedgerEntry], ...], tuple[tuple[DeadLetter, DeadLetter], ...]
]:
    """The letters to move, in the order of ``letters`` (partition, then offset), at most ``limit``:
    each origin once. Also the letters skipped as redriven before (unless ``force``: the letter's
    own ledger entry, or that of another letter of its origin, from ``recorded``) and the repeats of
    a chosen letter's origin, each with the chosen letter."""
    chosen: list[DeadLetter] = []
    skipped: list[tuple[DeadLetter, LedgerEntry]] = []
    repeats: list[tuple[DeadLetter, DeadLetter]] = []
    taken: dict[Origin, DeadLetter] = {}
    for letter in letters:
        origin = letter.origin
        entry = ledger.get(letter.ledger_key) or (recorded.get(origin) if origin is not None else None)
        if entry is not None and not force:
            skipped.append((letter, entry))
        elif origin is not None and origin in taken:
            repeats.append((letter, taken[origin]))
        elif limit is None or len(chosen) < limit:
            chosen.append(letter)
            if origin is not None:
                taken[origin] = letter
    return chosen, tuple(skipped), tuple(repeats)


def since(
    chosen: list[DeadLetter],
    skipped: tuple[tuple[DeadLetter, LedgerEntry], ...],
    first: dict[str, LedgerEntry],
    fresh: dict[str, LedgerEntry],
    origins: Mapping[str, Origin] | None = None,
) -> tuple[list[DeadLetter], tuple[tuple[DeadLetter, LedgerEntry], ...]]:
    """``chosen`` without the letters the ledger names now (``fresh``) but did not when they were
    chosen (``first``): another redrive of the topic moved them meanwhile, or moved another letter
    of their origin (``origins``: the origin of each letter read, by ledger key; a run with
    other filters may have chosen another copy of the same record). They join ``skipped``."""
    new = {key: entry for key, entry in fresh.items() if key not in first}
    if not new:
        return chosen, skipped
    moved_origins: dict[Origin, LedgerEntry] = {}
    for key, entry in new.items():
        origin = (origins or {}).get(key)
        if origin is not None:
            moved_origins.setdefault(origin, entry)
    late: list[tuple[DeadLetter, LedgerEntry]] = []
    for x in chosen:
        found = new.get(x.ledger_key) or (moved_origins.get(x.origin) if x.origin is not None else None)
        if found is not None:
            late.append((x, found))
    if not late:
        return chosen, skipped
    gone = {x.ledger_key for x, _ in late}
    return [x for x in chosen if x.ledger_key not in gone], (*skipped, *late)
