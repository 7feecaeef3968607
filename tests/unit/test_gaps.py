"""The commit metadata's encoding of finished offsets beyond the position, and the skip rule."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laneway.engine import gaps
from laneway.engine.offsets import OffsetTracker


@given(
    position=st.integers(min_value=0, max_value=2**40),
    finished=st.sets(st.integers(min_value=1, max_value=5_000), max_size=400),
)
def test_encode_then_decode_gives_back_the_finished_offsets(position: int, finished: set[int]) -> None:
    offsets = {position + f for f in finished}
    text = gaps.encode(position, offsets)
    assert text.startswith(gaps.VERSION)
    assert text.isascii() and "\n" not in text
    assert gaps.decode(position, text) == offsets


def test_the_shorter_form_is_chosen() -> None:
    dense_but_scattered = {100 + 2 * i for i in range(1, 500)}  # every other offset: a bitmap
    assert gaps.encode(100, dense_but_scattered)[3] == "b"
    one_long_run = set(range(200, 5_000))  # a run: a few characters
    text = gaps.encode(100, one_long_run)
    assert text[3] == "r" and len(text) < 20
    assert gaps.encode(100, []) == "lw1r"


@pytest.mark.parametrize(
    "text", ["", "lw1", "lw2r1+1", "xyz", "lw1r1", "lw1rZZ+1", "lw1r1+0", "lw1q", "lw1b***"]
)
def test_text_that_is_not_an_encoding_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        gaps.decode(10, text)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=300),
    order=st.randoms(use_true_random=False),
    crash_at=st.integers(min_value=0, max_value=300),
)
def test_nothing_unfinished_is_ever_skipped(n: int, order: object, crash_at: int) -> None:
    """Whatever the completion order and the crash point: the offsets a restart skips (the
    metadata of the last commit) were all finished, and the position plus them covers every
    finished offset below the highest one committed."""
    tracker = OffsetTracker()
    tracker.extend(list(range(n)))
    completion = list(range(n))
    order.shuffle(completion)  # type: ignore[attr-defined]
    finished: set[int] = set()
    for offset in completion[: min(crash_at, n)]:
        tracker.done(offset)
        finished.add(offset)
    position = tracker.position()
    assert position is not None
    beyond = tracker.finished_beyond()
    text = gaps.encode(position, beyond)
    skipped = gaps.decode(position, text)
    assert skipped <= finished  # nothing unfinished is skipped
    assert all(o > position for o in skipped)
    assert {o for o in finished if o > position} == skipped  # and nothing finished is redone


@settings(max_examples=200, deadline=None)
@given(
    position=st.integers(min_value=0, max_value=10**6),
    finished=st.sets(st.integers(min_value=1, max_value=5000), max_size=400),
    limit=st.integers(min_value=0, max_value=300),
)
def test_a_text_within_the_limit_names_a_prefix(position: int, finished: set[int], limit: int) -> None:
    """Past the limit the commit names the lowest finished offsets that fit: never an offset
    that is not finished, never one above an offset it leaves out, never over the limit, and
    the longest such prefix."""
    offsets = sorted(position + o for o in finished)
    text, named = gaps.encode_within(position, offsets, limit)
    assert len(text) <= limit
    if not text:
        assert named == 0 and len(gaps.encode(position, [])) > limit
        return
    assert gaps.decode(position, text) == set(offsets[:named])
    if len(gaps.encode(position, offsets)) <= limit:
        assert named == len(offsets)  # all of them when they fit
    else:
        # the longest prefix that fits: no longer one does
        assert all(
            len(gaps.encode(position, offsets[:k])) > limit for k in range(named + 1, len(offsets) + 1)
        )
