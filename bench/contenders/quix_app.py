"""quixstreams: an Application with one ``apply`` step (runs in bench/.venv-quix)."""

from __future__ import annotations

import threading
from typing import Any

from quixstreams import Application, message_context  # type: ignore[import-not-found,unused-ignore]

from bench.workload import Recorder, RunSpec


def run(spec: RunSpec, rec: Recorder) -> None:
    app = Application(
        broker_address=spec.bootstrap,
        consumer_group=spec.group,
        auto_offset_reset="earliest",
        commit_interval=spec.commit_interval,
        loglevel="WARNING",
        auto_create_topics=False,
        use_changelog_topics=False,
    )
    topic = app.topic(spec.topic, key_deserializer="bytes", value_deserializer="bytes")
    sdf = app.dataframe(topic)
    handle = rec.handle

    def apply(value: bytes) -> Any:
        ctx = message_context()
        handle(ctx.partition, ctx.offset, value)
        return value

    sdf = sdf.apply(apply)

    def stop_when_done() -> None:
        rec.done.wait(spec.timeout)
        app.stop()

    threading.Thread(target=stop_when_done, daemon=True).start()
    app.run()
