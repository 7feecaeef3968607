"""Which letters a redrive moves: partition by partition, lowest offset first, each origin (the
record a letter copies) once; letters whose record the ledger names are skipped. No broker."""

from __future__ import annotations

from laneway.kafka import dlq_reader as dr
from laneway.kafka import headers as h
from laneway.kafka.redrive_plan import choose as _choose


def _letter(partition: int, offset: int, origin_offset: int) -> dr.DeadLetter:
    info = {h.ORIGINAL_TOPIC: "orders", h.ORIGINAL_PARTITION: "1", h.ORIGINAL_OFFSET: str(origin_offset)}
    return dr.DeadLetter("orders.dlq", partition, offset, b"k", b"{}", None, (), info)


def _at(letters: list[dr.DeadLetter]) -> list[tuple[int, int]]:
    return [(x.partition, x.offset) for x in letters]


def test_each_record_once_the_repeats_named() -> None:
    first, other, again = _letter(0, 0, 40), _letter(0, 1, 41), _letter(1, 0, 40)
    assert dr.repeated_letters([first, other, again]) == {again.ledger_key: first}
    chosen, skipped, repeats = _choose([first, other, again], {}, {}, force=False, limit=None)
    assert _at(chosen) == [(0, 0), (0, 1)] and skipped == () and repeats == ((again, first),)


def test_a_limit_counts_records_and_reports_the_repeats_of_those_it_moves() -> None:
    letters = [_letter(0, 0, 40), _letter(0, 1, 40), _letter(0, 2, 41), _letter(1, 0, 41)]
    chosen, _, repeats = _choose(letters, {}, {}, force=False, limit=1)
    assert _at(chosen) == [(0, 0)] and [(x.offset, y.offset) for x, y in repeats] == [(1, 0)]


def test_a_record_the_ledger_names_through_another_letter_is_skipped_unless_forced() -> None:
    entry = dr.LedgerEntry("orders.dlq/0/0", "r1", "orders", 1, 99, "2026-11-20T10:00:00")
    again = _letter(1, 0, 40)  # the ledgered letter 0/0 (filtered out here) had origin orders/1/40
    chosen, skipped, _ = _choose(
        [again], {entry.key: entry}, {("orders", 1, 40, b"k"): entry}, force=False, limit=None
    )
    assert chosen == [] and skipped == ((again, entry),)
    chosen, skipped, _ = _choose(
        [again], {entry.key: entry}, {("orders", 1, 40, b"k"): entry}, force=True, limit=None
    )
    assert chosen == [again] and skipped == ()


def test_the_same_position_with_another_key_is_another_record() -> None:
    """A topic recreated uses its offsets again: a letter of orders/1/40 with another key is not a repeat."""
    first = _letter(0, 0, 40)
    other = dr.DeadLetter("orders.dlq", 0, 1, b"other", b"{}", None, (), dict(first.info))
    assert dr.repeated_letters([first, other]) == {}
    assert _choose([first, other], {}, {}, force=False, limit=None)[0] == [first, other]


def test_letters_another_redrive_moved_since_they_were_chosen_are_skipped() -> None:
    from laneway.kafka.redrive_plan import since as _since

    a, b, c = _letter(0, 0, 40), _letter(0, 1, 41), _letter(0, 2, 42)
    old = dr.LedgerEntry(a.ledger_key, "r0", "orders", 1, 7, "2026-11-20T10:00:00")
    late = dr.LedgerEntry(b.ledger_key, "r1", "orders", 1, 99, "2026-11-20T10:00:01")
    # chosen when the ledger named only a (skipped then); by the fence, another run moved b
    chosen, skipped = _since(
        [b, c], ((a, old),), {a.ledger_key: old}, {a.ledger_key: old, b.ledger_key: late}
    )
    assert _at(chosen) == [(0, 2)] and skipped == ((a, old), (b, late))
    assert _since([b, c], (), {}, {}) == ([b, c], ())


def test_a_letter_whose_record_another_redrive_moved_through_another_letter_is_skipped() -> None:
    """Two letters of one record (dead-lettered again after a redrive): a run with a filter that
    took only the second moved it while this run, which chose the first, waited at its fence."""
    from laneway.kafka.redrive_plan import since as _since

    first, second, other = _letter(0, 0, 40), _letter(0, 5, 40), _letter(0, 6, 41)
    moved = dr.LedgerEntry(second.ledger_key, "r1", "orders", 1, 99, "2026-11-20T10:00:01")
    origins = {x.ledger_key: x.origin for x in (first, second, other) if x.origin is not None}
    chosen, skipped = _since([first, other], (), {}, {second.ledger_key: moved}, origins)
    assert chosen == [other] and skipped == ((first, moved),)
    # an entry that was in the ledger at the choice does not count again
    assert _since([first, other], (), {second.ledger_key: moved}, {second.ledger_key: moved}, origins) == (
        [first, other],
        (),
    )


def test_a_redrive_fenced_by_another_says_so() -> None:
    """A fenced run said its target 'refused' a letter and to fix a size."""
    import confluent_kafka

    from laneway.kafka.producer import ProduceError
    from laneway.kafka.redrive_move import refused

    letter = _letter(0, 5, 45)
    fenced = ProduceError(
        "fenced", topic="orders", kafka_error=confluent_kafka.KafkaError(confluent_kafka.KafkaError._FENCED)
    )
    text = str(refused(letter, fenced, in_batch=20, recorded=40))
    assert "another redrive of orders.dlq started and fenced this one" in text and "40 letter(s)" in text
    other = ProduceError(
        "nope",
        topic="orders",
        kafka_error=confluent_kafka.KafkaError(confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED),
    )
    assert "refused dead letter" in str(refused(letter, other, in_batch=20, recorded=40))
