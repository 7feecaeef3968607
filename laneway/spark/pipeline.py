"""The Spark pipeline: ``catalog.entities`` on Kafka into Delta tables, with Structured Streaming.

``run_pipeline`` starts the streaming query and waits for it to end or be stopped. Spark's own
Kafka source reads the topic; ``foreachBatch`` (``laneway.spark.batch``) applies each
micro-batch with idempotent Delta writes (MERGEs, a checked append, a rewrite), so a batch
replayed after a crash, a duplicate record, or a replay of the whole topic changes nothing:

1. parse each value against the record contract (``laneway.spark.schema``); a record that
   fails to parse or lacks a required field goes to ``quarantine`` (keyed by topic,
   partition, offset) and is counted, never raised (``laneway.spark.parse``);
2. ``entities``: per entity the batch's newest version, applied only when newer than the
   stored one (a delete sets ``deleted``: an older change replayed later cannot undo it)
   (``laneway.spark.merge``);
3. ``entity_history``: append each (entity_id, version) not already there, after the
   ``entities`` MERGE has committed (``laneway.spark.history``);
4. ``lineage_edges``: after the ``entities`` MERGE has committed, rewritten whole from it (the
   lineage entities that are not deleted and have both ends), side by side with step 3
   (``laneway.spark.lineage``);
5. every ``compact_every`` batches, ``OPTIMIZE`` (bin-packing small files) each table
   (``laneway.spark.batch``).

The settings and triggers are in ``laneway.spark.settings``, the tables' creation in
``laneway.spark.tables``, and the run's reports and Prometheus metrics in
``laneway.spark.metrics``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from laneway.errors import LanewayError
from laneway.spark.batch import _BatchWriter
from laneway.spark.metrics import PipelineMetrics, PipelineResult, _default_metrics
from laneway.spark.progress import GroupProgress, end_offsets, latest_offsets, logged_offsets
from laneway.spark.session import SessionSettings, build_session
from laneway.spark.settings import (
    _CHECKPOINT_FILE_MANAGER,
    _LOCAL_CHECKPOINT_FILE_MANAGER,
    PipelineSettings,
    _local,
)
from laneway.spark.tables import ensure_tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["PipelineError", "run_pipeline"]

logger = logging.getLogger(__name__)


_CHECKPOINT_SIGNS = (
    "MALFORMED_LOG_FILE",
    "checkpoint",
    "concurrently using metadata",
    "/offsets/",
    "/commits/",
    "/metadata",
)


def _explain(error: object, settings: PipelineSettings) -> str:
    """One first line that says what failed; Spark's own text follows for the post-mortem."""
    text = str(error)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)[:300]
    if any(sign in text for sign in _CHECKPOINT_SIGNS):
        return (
            f"the streaming checkpoint at {settings.checkpoint} is damaged or unreadable ({first}). "
            "Recover by replaying from offsets: move it aside and run with a new checkpoint "
            "(laneway pipeline run --checkpoint NEW --starting-offsets earliest); the MERGEs are "
            "idempotent, so what had landed is not applied twice (RELIABILITY.md).\n" + text
        )
    return f"the streaming query failed: {first}\n{text}"


class PipelineError(LanewayError):
    """The streaming query failed; ``__cause__`` holds Spark's exception."""


def _stream(spark: SparkSession, settings: PipelineSettings, writer: _BatchWriter) -> Any:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap)
        .option("subscribe", settings.topic)
        .option("startingOffsets", settings.starting_offsets)
    )
    for key, value in settings.kafka_source_options().items():  # the batch cap among them
        reader = reader.option(key, value)
    stream = (
        reader.load()
        .writeStream.queryName(f"laneway-pipeline-{settings.topic}")
        .option("checkpointLocation", settings.checkpoint)
        .foreachBatch(writer)
    )
    interval = settings.trigger_interval_ms
    if interval is None:
        stream = stream.trigger(availableNow=True)
    else:
        stream = stream.trigger(processingTime=f"{interval} milliseconds")
    if not _local(settings.checkpoint):
        return stream.start()
    # the query copies the session's settings when it starts: the caller's session keeps its own
    before = spark.conf.get(_CHECKPOINT_FILE_MANAGER, None)
    spark.conf.set(_CHECKPOINT_FILE_MANAGER, _LOCAL_CHECKPOINT_FILE_MANAGER)
    try:
        return stream.start()
    finally:
        if before is None:
            spark.conf.unset(_CHECKPOINT_FILE_MANAGER)
        else:
            spark.conf.set(_CHECKPOINT_FILE_MANAGER, before)


def _batch_cap(settings: PipelineSettings) -> str:
    """The batch cap as the start-up line says it, as Spark's Kafka source gets it."""
    cap = settings.kafka_source_options().get("maxOffsetsPerTrigger")
    return f"at most {int(cap):,} records a batch" if cap else "no batch cap: a batch takes all there is"


class _StopSignals:
    """SIGINT and SIGTERM ask the run to stop, on the main thread, while it runs.

    pyspark's own SIGINT handler cancels every job over py4j while the main thread waits in
    ``awaitTermination``: that call fails as re-entrant, and the query dies with a py4j
    traceback. These handlers only note the signal; the run's loop stops the query once the
    batch in progress has finished. Off the main thread (no handlers can be set) they do nothing.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._before: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._before[signum] = signal.signal(signum, self._note)
        return self

    def _note(self, signum: int, frame: object) -> None:
        if self.received is None:
            logger.info("%s: stopping once the batch in progress has landed", signal.Signals(signum).name)
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._before.items():
            signal.signal(signum, handler)


def _stop_between_batches(query: Any, writer: _BatchWriter, wait: float = 600.0) -> None:
    """Stop the query between two batches: a batch stopped half-way has committed some tables
    and not others until a later run replays it.

    The stop comes at the first of: a moment with no batch in progress, or the end of the batch
    in progress (waited for up to ``wait`` seconds). A run that falls behind its trigger starts
    each batch as the last one ends, so the batch that lands once the stop is asked holds
    Spark's thread (``_BatchWriter.stopping``) until the query is marked stopped: Spark starts
    no other batch after it.
    """
    writer.stopping.set()
    deadline = time.monotonic() + wait
    while query.isActive and time.monotonic() < deadline and not writer.landed.is_set():
        if not writer.in_batch and not query.status.get("isTriggerActive", False):
            break
        time.sleep(0.05)
    # stop() marks the query stopped first, then waits for its thread: a batch held at its end
    # is let go once the mark is there, and Spark's loop ends instead of starting the next
    failed: list[BaseException] = []

    def stop() -> None:
        try:
            query.stop()
        except BaseException as exc:  # raised on the caller's thread below
            failed.append(exc)

    stopper = threading.Thread(target=stop, name="laneway-pipeline-stop", daemon=True)
    stopper.start()
    while query.isActive and stopper.is_alive():
        time.sleep(0.01)
    writer.released.set()
    stopper.join()
    if failed:
        raise failed[0]


def run_pipeline(
    settings: PipelineSettings,
    spark: SparkSession | None = None,
    *,
    stop_after_batches: int | None = None,
    stop_event: threading.Event | None = None,
    metrics: PipelineMetrics | None = None,
) -> PipelineResult:
    """Run the pipeline until it is done (available-now) or stopped, and report what it did.

    With ``spark=None`` a session is built on ``settings.master`` and stopped at the end.
    A processing-time run stops after ``stop_after_batches`` batches of this run, or when
    ``stop_event`` is set. On the main thread, SIGTERM stops it the same way, and SIGINT too,
    then raises KeyboardInterrupt; a stop lets the batch in progress land first.
    Raises ``PipelineError`` when the streaming query fails.
    """
    own = spark is None
    session = (
        spark
        if spark is not None
        else build_session(
            SessionSettings(master=settings.master, app_name="laneway-pipeline", conf=settings.spark_conf)
        )
    )
    sink = metrics if metrics is not None else _default_metrics()
    writer = _BatchWriter(settings, sink)
    try:
        # a table with deletion vectors enabled before gets the per-batch choice too: without it,
        # Delta would write them in every MERGE, large batches included
        writer.deletion_vectors = ensure_tables(
            session, settings.warehouse, deletion_vectors=settings.deletion_vectors
        )
        try:
            query = _stream(session, settings, writer)
        except Exception as exc:  # Py4JJavaError / StreamingQueryException while starting
            raise PipelineError(_explain(exc, settings)) from exc
        logger.info(
            "pipeline started: %s -> %s (trigger %s, %s)",
            settings.topic,
            settings.warehouse,
            settings.trigger,
            _batch_cap(settings),
        )
        progress = (
            GroupProgress(settings.bootstrap, settings.progress_group, settings.topic, settings.client_config)
            if settings.progress_group
            else None
        )

        def report_progress() -> None:
            last = query.lastProgress
            offsets = end_offsets(last, settings.topic)
            if offsets:
                sink.observe_offsets(settings.topic, offsets, latest_offsets(last, settings.topic))
                if progress is not None:
                    progress.commit(offsets)

        with _StopSignals() as signals:
            try:
                while not query.awaitTermination(0.5):
                    report_progress()
                    done = stop_after_batches is not None and len(writer.reports) >= stop_after_batches
                    asked = signals.received is not None or (stop_event is not None and stop_event.is_set())
                    if done or asked:
                        _stop_between_batches(query, writer)
                        break
            except KeyboardInterrupt:
                _stop_between_batches(query, writer)
                raise
            except Exception as exc:
                raise PipelineError(_explain(exc, settings)) from exc
        failure = query.exception()
        if failure is not None:
            raise PipelineError(_explain(failure, settings))
        report_progress()  # the last batches, landed since the last look
        last = query.lastProgress
        if writer.reports and (last is None or last.get("batchId", -1) < writer.reports[-1].batch_id):
            # the stop cut off the last landed batch's commit marker, and Spark reported no
            # progress for it: its offsets are in the offset log
            offsets = logged_offsets(settings.checkpoint, writer.reports[-1].batch_id, settings.topic)
            if offsets:
                sink.observe_offsets(settings.topic, offsets, None)
                if progress is not None:
                    progress.commit(offsets)
        if progress is not None:
            progress.close()
        if signals.received == signal.SIGINT:
            raise KeyboardInterrupt
    finally:
        if own:
            session.stop()
    result = writer.result()
    logger.info(
        "pipeline done: %d batches, %d records, %d quarantined",
        len(result.batches),
        result.records,
        result.quarantined,
    )
    return result
