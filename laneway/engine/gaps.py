"""The finished offsets beyond a commit position, as text for the commit's metadata.

A partition's commit position is its lowest unfinished offset; records after it may be
finished already (other keys ran on). Committed with the position, they need not run again
after a restart: the next owner reads them back and skips them.

The encoding is versioned text, ``lw1`` then one of two forms, whichever is shorter:

* ``r`` runs: ``gap+length`` pairs in hexadecimal, comma-separated; each gap counts from the
  end of the run before (the first from the position), e.g. position 100 and finished 102,
  103, 110 give ``lw1r2+2,7+1``;
* ``b`` bitmap: bit *i* says whether offset position + 1 + *i* is finished, base64url without
  padding, least significant bit first in each byte.

The position itself is never finished (it is the lowest unfinished), so offsets start after it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable

__all__ = ["VERSION", "decode", "encode", "encode_within"]

#: the prefix of every encoding this module writes
VERSION = "lw1"
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


def encode(position: int, finished: Iterable[int]) -> str:
    """The shorter of the runs and the bitmap encodings of ``finished`` (each > ``position``)."""
    rel = sorted(o - position - 1 for o in finished)
    if not rel:
        return f"{VERSION}r"
    if rel[0] < 0:
        raise ValueError(f"a finished offset at or below the position {position}")
    runs: list[str] = []
    end = 0  # the first relative offset after the previous run
    start = prev = rel[0]
    for o in rel[1:]:
        if o == prev + 1:
            prev = o
            continue
        runs.append(f"{start - end:x}+{prev - start + 1:x}")
        end, start, prev = prev + 1, o, o
    runs.append(f"{start - end:x}+{prev - start + 1:x}")
    as_runs = "r" + ",".join(runs)
    if len(as_runs) <= 8 + rel[-1] // 6:  # the bitmap takes ~ 4 characters per 24 bits
        return VERSION + as_runs
    bits = bytearray(rel[-1] // 8 + 1)
    for o in rel:
        bits[o >> 3] |= 1 << (o & 7)
    as_bitmap = "b" + base64.urlsafe_b64encode(bytes(bits)).decode().rstrip("=")
    return VERSION + min(as_runs, as_bitmap, key=len)


def encode_within(position: int, finished: list[int], limit: int) -> tuple[str, int]:
    """The encoding of the longest prefix of ``finished`` (sorted, each > ``position``) whose
    text takes at most ``limit`` characters, and how many offsets it names; ``("", 0)`` when not
    even an empty one fits. A restart skips what it names and redoes the rest: a prefix is
    always safe to commit. One pass measures each prefix's text as :func:`encode` writes it
    (stopping once both forms are past the limit), then the chosen prefix is encoded once."""
    room = limit - len(VERSION) - 1  # after the version and the form's letter
    if room < 0:
        return "", 0
    top = finished[-1] - position - 1 if finished else 0
    if (4 * (top // 8 + 1) + 2) // 3 + 9 <= room:  # the bitmap fits, and runs chosen over it too
        return encode(position, finished), len(finished)
    best = 0
    done = 0  # the characters of the runs before the current one, each with its comma
    end = 0  # the first relative offset after the run before the current one
    start = prev = -2
    for k, o in enumerate(finished, 1):
        o -= position + 1
        if o == prev + 1:
            prev = o
        else:
            if k > 1:
                done += _hex_len(start - end) + _hex_len(prev - start + 1) + 2
                end = prev + 1
            start = prev = o
        runs = done + _hex_len(start - end) + _hex_len(prev - start + 1) + 1
        bitmap = (4 * (o // 8 + 1) + 2) // 3  # base64 without padding
        if min(runs, bitmap) > room:
            break  # both forms only grow from here
        if (runs if runs + 1 <= 8 + o // 6 else min(runs, bitmap)) <= room:
            best = k
    return encode(position, finished if best == len(finished) else finished[:best]), best


def _hex_len(n: int) -> int:
    """The hexadecimal digits of ``n`` >= 0, as ``f"{n:x}"`` writes it."""
    return 1 if n < 16 else (n.bit_length() + 3) // 4


def decode(position: int, text: str, limit: int | None = None) -> set[int]:
    """The finished offsets ``text`` encodes for ``position``; ValueError when it is not one
    of this module's encodings, or when it names more than ``limit`` offsets (a few characters
    of runs can name billions: the reader bounds its memory)."""
    if not text.startswith(VERSION) or len(text) < len(VERSION) + 1:
        raise ValueError(f"not a Laneway gap encoding: {text[:40]!r}")
    form, body = text[len(VERSION)], text[len(VERSION) + 1 :]
    out: set[int] = set()
    if form == "r":
        end = 0
        for item in body.split(",") if body else []:
            gap, sep, length = item.partition("+")
            if not sep:
                raise ValueError(f"a run without its length: {item!r}")
            start, n = end + int(gap, 16), int(length, 16)
            if n < 1 or int(gap, 16) < 0:
                raise ValueError(f"an empty or negative run: {item!r}")
            if limit is not None and len(out) + n > limit:
                raise ValueError(f"more than {limit} offsets")
            out.update(range(position + 1 + start, position + 1 + start + n))
            end = start + n
        return out
    if form == "b":
        if not _BASE64URL.fullmatch(body) or len(body) % 4 == 1:
            raise ValueError(f"a bitmap that is not base64url: {body[:40]!r}")
        bits = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        if limit is not None and sum(b.bit_count() for b in bits) > limit:
            raise ValueError(f"more than {limit} offsets")
        for i, byte in enumerate(bits):
            while byte:
                low = byte & -byte
                out.add(position + 1 + i * 8 + low.bit_length() - 1)
                byte ^= low
        return out
    raise ValueError(f"an unknown form {form!r} in {text[:40]!r}")
