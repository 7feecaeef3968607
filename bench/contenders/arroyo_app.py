"""sentry-arroyo: StreamProcessor, RunTaskInThreads, CommitOffsets, a once-per-interval commit policy."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from arroyo.backends.kafka import KafkaConsumer, KafkaPayload
from arroyo.backends.kafka.configuration import build_kafka_consumer_configuration
from arroyo.commit import CommitPolicy
from arroyo.processing import StreamProcessor
from arroyo.processing.strategies import CommitOffsets, ProcessingStrategy, ProcessingStrategyFactory
from arroyo.processing.strategies.run_task_in_threads import RunTaskInThreads
from arroyo.types import Commit, Message, Partition, Topic

from bench.workload import Recorder, RunSpec


class _Factory(ProcessingStrategyFactory[KafkaPayload]):
    def __init__(self, spec: RunSpec, rec: Recorder) -> None:
        self._spec = spec
        self._handle = rec.handle

    def create_with_partitions(
        self, commit: Commit, partitions: Mapping[Partition, int]
    ) -> ProcessingStrategy[KafkaPayload]:
        handle = self._handle

        def work(msg: Message[KafkaPayload]) -> None:
            bv: Any = msg.value
            handle(bv.partition.index, bv.offset, msg.payload.value)

        return RunTaskInThreads(
            work,
            concurrency=self._spec.concurrency,
            max_pending_futures=self._spec.max_events,
            next_step=CommitOffsets(commit),
        )


def run(spec: RunSpec, rec: Recorder) -> None:
    config = build_kafka_consumer_configuration(
        {},
        bootstrap_servers=[spec.bootstrap],
        group_id=spec.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    processor = StreamProcessor(
        KafkaConsumer(config),
        Topic(spec.topic),
        _Factory(spec, rec),
        commit_policy=CommitPolicy(min_commit_frequency_sec=spec.commit_interval, min_commit_messages=None),
    )

    def stop_when_done() -> None:
        rec.done.wait(spec.timeout)
        processor.signal_shutdown()

    threading.Thread(target=stop_when_done, daemon=True).start()
    processor.run()
