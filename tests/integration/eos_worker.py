"""An exactly-once Laneway worker: ``laneway run tests.integration.eos_worker:app``.

Env: LW_BOOTSTRAP, LW_TOPIC (input), LW_OUTPUT (output topic), LW_GROUP. Each input record
emits one output record carrying the input's value; outputs and consumed offsets commit in
one Kafka transaction.
"""

from __future__ import annotations

import os
import time

from laneway import App, Event, ExactlyOnce, Timeouts


def _build() -> App | None:
    env = os.environ
    if "LW_BOOTSTRAP" not in env:
        return None
    app = App(
        f"eos-{os.getpid()}",
        bootstrap_servers=env["LW_BOOTSTRAP"],
        group_id=env["LW_GROUP"],
        concurrency=16,
        timeouts=Timeouts(commit_interval=0.2),
        # a stable id across restarts: fences the killed one
        exactly_once=ExactlyOnce(transactional_id=f"{env['LW_GROUP']}-replica-0"),
        kafka_config={"session.timeout.ms": 6000},
    )
    output = env["LW_OUTPUT"]

    @app.handler(env["LW_TOPIC"])
    def handle(ev: Event) -> None:
        time.sleep(0.004)
        ev.emit(output, ev.value, key=ev.key)

    return app


app = _build()
