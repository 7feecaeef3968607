"""Broker-free stand-ins for a redrive (laneway.kafka.redrive): its reads answer from a list of
letters and a ledger, and its transactional producer runs over :class:`FakeClient`, a
confluent-kafka ``Producer`` whose ``flush`` delivers what was produced. ``FakeClient`` can meet
a fence the way confluent-kafka shows it: failed delivery reports, transactional calls that fail
fatally, and the fatal error raised out of a flush as a ``SystemError`` whose cause is the
``KafkaException`` (confluent-kafka sets the error, then runs delivery callbacks, and CPython
raises "... returned a result with an exception set").
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
import pytest

from laneway.kafka import dlq_reader as dr
from laneway.kafka import headers as h
from laneway.kafka import redrive as rd

DLQ = "orders.dlq"
LEDGER = dr.ledger_topic(DLQ)


def fatal_error(code: int = confluent_kafka.KafkaError._FENCED) -> confluent_kafka.KafkaError:
    return confluent_kafka.KafkaError(code, "Producer fenced by newer instance", fatal=True)


def system_error(kerr: confluent_kafka.KafkaError) -> SystemError:
    """What confluent-kafka raises out of a flush or poll that met a fatal error and then ran a
    delivery callback: a SystemError, the KafkaException its cause."""
    try:
        try:
            raise confluent_kafka.KafkaException(kerr)
        except confluent_kafka.KafkaException as cause:
            raise SystemError(
                "<class 'laneway.kafka.producer.ProduceError'> returned a result with an exception set"
            ) from cause
    except SystemError as exc:
        return exc


class _Message:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._at = (topic, partition, offset)

    def topic(self) -> str:
        return self._at[0]

    def partition(self) -> int:
        return self._at[1]

    def offset(self) -> int:
        return self._at[2]

    def timestamp(self) -> tuple[int, int]:
        return (confluent_kafka.TIMESTAMP_CREATE_TIME, 1_795_168_800_000)


@dataclass
class FakeClient:
    """confluent-kafka's ``Producer`` for a transactional producer, without a broker.

    ``fence``: where another redrive's producer fences this one. ``("reports", n)``: the delivery
    reports of transaction ``n`` fail, and the fatal error comes out of the next flush (the
    close's); ``("flush", n)``: it comes out of transaction ``n``'s flush; ``("commit", n)``: the
    commit of transaction ``n`` fails; ``("lost", n)`` and ``("flush-lost", n)``: the commit (the
    flush) of transaction ``n`` reports the fatal error to the error callback and raises a bare
    ``SystemError`` (the error lost on its way out);
    ``("close", 0)``: it comes out of the flush after the last commit (the close's). Once fenced,
    every transactional call fails. ``on_commit`` is called after each commit with the number of
    commits so far.
    """

    config: dict[str, Any]
    fence: tuple[str, int] | None = None
    poll_raises: BaseException | None = None
    on_commit: Callable[[int], None] | None = None
    queue: list[tuple[str, bytes | None, Callable[..., None], int | None]] = field(default_factory=list)
    txn: list[tuple[str, bytes | None]] = field(default_factory=list)
    committed: list[tuple[str, bytes | None]] = field(default_factory=list)
    begun: int = 0
    commits: int = 0
    in_txn: bool = False
    fatal: confluent_kafka.KafkaError | None = None
    pending: confluent_kafka.KafkaError | None = None  # raised out of the next flush
    polled: threading.Event = field(default_factory=threading.Event)
    _offsets: Iterator[int] = field(default_factory=itertools.count)

    # -- the transactional calls ------------------------------------------------------

    def _check(self) -> None:
        if self.fatal is not None:
            raise confluent_kafka.KafkaException(self.fatal)

    def init_transactions(self, timeout: float) -> None:
        self._check()

    def begin_transaction(self) -> None:
        self._check()
        self.begun += 1
        self.in_txn = True
        self.txn = []

    def commit_transaction(self, timeout: float) -> None:
        self._check()
        if self.fence == ("commit", self.begun):
            self.fence, self.fatal = None, fatal_error()
            self._check()
        if self.fence == ("lost", self.begun):
            self.fence, self.fatal = None, fatal_error()
            self.config["error_cb"](self.fatal)
            raise SystemError(
                "<built-in method commit_transaction> returned NULL without setting an exception"
            )
        self._deliver(None)  # a commit flushes
        self.committed.extend(self.txn)
        self.in_txn = False
        self.commits += 1
        if self.on_commit is not None:
            self.on_commit(self.commits)

    def abort_transaction(self, timeout: float) -> None:
        self._check()
        self.queue.clear()
        self.in_txn = False

    # -- producing ---------------------------------------------------------------------

    def produce(self, topic: str, **kwargs: Any) -> None:
        self._check()
        self.queue.append((topic, kwargs.get("key"), kwargs["on_delivery"], kwargs.get("partition")))

    def _deliver(self, err: confluent_kafka.KafkaError | None) -> None:
        queued, self.queue = self.queue, []
        for topic, key, delivered, partition in queued:
            if err is None:
                self.txn.append((topic, key))
            delivered(err, _Message(topic, partition or 0, next(self._offsets)))

    def flush(self, timeout: float = -1) -> int:
        if self.pending is not None:
            err, self.pending = self.pending, None
            self.queue.clear()
            raise system_error(err)
        kind, at = self.fence or ("", -1)
        if self.in_txn and self.begun == at and kind in ("reports", "flush", "flush-lost"):
            self.fence, self.fatal = None, fatal_error()
            if kind == "flush":
                self.queue.clear()
                raise system_error(self.fatal)
            if kind == "flush-lost":
                self.queue.clear()
                self.config["error_cb"](self.fatal)
                raise SystemError("<built-in method flush> returned NULL without setting an exception")
            self._deliver(confluent_kafka.KafkaError(confluent_kafka.KafkaError._FENCED))
            self.pending = self.fatal
            return 0
        if not self.in_txn and kind == "close":
            self.fence = None
            self.fatal = fatal_error()
            raise system_error(self.fatal)
        self._deliver(None)
        return 0

    def poll(self, timeout: float = -1) -> int:
        self.polled.set()
        if self.poll_raises is not None:
            raised, self.poll_raises = self.poll_raises, None
            raise raised
        time.sleep(min(max(timeout, 0), 0.01))  # the poll thread's pace; nothing to serve here
        return 0

    def __len__(self) -> int:
        return len(self.queue)


def letter(offset: int) -> dr.DeadLetter:
    info = {h.ORIGINAL_TOPIC: "orders", h.ORIGINAL_PARTITION: "1", h.ORIGINAL_OFFSET: str(40 + offset)}
    return dr.DeadLetter(DLQ, 0, offset, f"k{offset}".encode(), b"{}", None, (), info)


@dataclass
class FakeBroker:
    """What a redrive reads (``letters``, ``ledger``) and the clients its producers made."""

    letters: list[dr.DeadLetter]
    ledger: dict[str, dr.LedgerEntry] = field(default_factory=dict)
    fence: tuple[str, int] | None = None
    clients: list[FakeClient] = field(default_factory=list)
    #: called with (topic, records read) after each record a read hands over
    on_read: Callable[[str, int], None] | None = None
    #: called with the number of commits so far after each commit of a producer
    on_commit: Callable[[int], None] | None = None

    def _read(self, topic: str, items: list[Any], progress: dr.Progress | None, stop: Any) -> list[Any]:
        out = []
        if progress is not None:
            progress(0, len(items))
        for i, item in enumerate(items, 1):
            if stop is not None and stop.is_set():
                break
            out.append(item)
            if progress is not None:
                progress(i, len(items))
            if self.on_read is not None:
                self.on_read(topic, i)
        return out

    def read_ledger(self, bootstrap: str, dlq_topic: str, **kwargs: Any) -> dict[str, dr.LedgerEntry]:
        """``ledger`` with an entry for each ledger record a producer committed."""
        entries = dict(self.ledger)
        for key in self.recorded:
            name = (key or b"").decode()
            entries[name] = dr.LedgerEntry(name, "earlier", "orders", 1, 0, "2026-11-20T10:00:00")
        items = self._read(LEDGER, list(entries.items()), kwargs.get("progress"), kwargs.get("stop"))
        return dict(items)

    def read_dead_letters(self, bootstrap: str, topic: str, **kwargs: Any) -> list[dr.DeadLetter]:
        seen = kwargs.get("seen")
        out = self._read(topic, list(self.letters), kwargs.get("progress"), kwargs.get("stop"))
        for x in out:
            if seen is not None:
                seen(x)
        return out

    def client(self, config: dict[str, Any]) -> FakeClient:
        made = FakeClient(config, fence=self.fence, on_commit=self.on_commit)
        self.clients.append(made)
        return made

    @property
    def sent(self) -> list[bytes | None]:
        """The keys of the records committed to the target topic, by every producer."""
        return [key for c in self.clients for topic, key in c.committed if topic == "orders"]

    @property
    def recorded(self) -> list[bytes | None]:
        """The keys of the ledger entries committed, by every producer."""
        return [key for c in self.clients for topic, key in c.committed if topic == LEDGER]


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> FakeBroker:
    """A dead-letter topic of 6 letters, no ledger yet; a redrive of it needs no broker."""
    fake = FakeBroker([letter(i) for i in range(6)])
    monkeypatch.setattr(rd, "connect", lambda bootstrap: object())
    monkeypatch.setattr(rd, "read_ledger", fake.read_ledger)
    monkeypatch.setattr(rd, "read_dead_letters", fake.read_dead_letters)
    monkeypatch.setattr(rd, "_targets", lambda admin, chosen, to: ({"orders": 2}, {"orders": 1_000_000}))
    monkeypatch.setattr(rd, "_ensure_ledger", lambda admin, topic: False)
    monkeypatch.setattr(confluent_kafka, "Producer", fake.client)
    return fake
