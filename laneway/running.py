"""What an :class:`~laneway.app.App` runs between its start and its shutdown: the HTTP endpoint,
the dead-letter sink, the processor and the consumers; how they are started, closed, and
judged healthy. The App's methods call these; users call the App's."""

from __future__ import annotations

import errno
import logging
import socket
import time
from typing import TYPE_CHECKING

from laneway.engine.handlers import HandlerSpec
from laneway.engine.processor import Processor
from laneway.errors import ConfigError
from laneway.kafka.dlq import KafkaDeadLetters
from laneway.kafka.source import KafkaSource
from laneway.lifecycle import restore_gc, tune_gc
from laneway.monitor.joining import JoinWatch
from laneway.monitor.metrics import HealthServer
from laneway.settings import replica

if TYPE_CHECKING:
    from laneway.app import App

__all__ = ["bind_server", "close", "health", "launch", "traced_handlers"]

logger = logging.getLogger("laneway.app")


def bind_server(app: App) -> HealthServer | None:
    """The HTTP endpoint, bound but not serving: a port in use fails the start, naming the
    field, before anything runs."""
    if (wanted := app.settings.metrics_server) is None:
        return None
    try:
        return HealthServer(
            app.metrics.registry,
            app.health,
            wanted.port,
            host=wanted.host,
            status=app.status.document,
        )
    except OSError as exc:
        host = isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL  # not a port's fault
        raise ConfigError(
            "metrics_server.host" if host else "metrics_server.port",
            f"cannot serve on {wanted.host}:{wanted.port}: {exc.strerror or exc}",
        ) from None


def launch(app: App, server: HealthServer | None) -> None:
    """Start the HTTP endpoint, the workers and the consumers."""
    s = app.settings
    if server is not None:
        app._server = server.start()
    if s.gc_tuning:
        tune_gc()
        app._gc_tuned = True
    app._dead_letters = KafkaDeadLetters(app._producer_config())
    app.processor = Processor(
        traced_handlers(app),
        concurrency=s.concurrency,
        event_loop=s.event_loop,
        dead_letters=app._dead_letters,
        metrics=app.metrics,
        on_fatal=app._on_fatal,
    )
    app.status.delays = {t: h.delay.seconds for t, h in app.handlers.items() if h.delay is not None}
    app.status.topics = sorted(app.handlers)
    joins = JoinWatch.of(s, app.metrics, app._life.stopping)  # logs a wait for the group
    app.status.start(joins)
    topics = sorted(app.handlers)
    for i in range(s.consumers):
        conf = {**app._client_config(), "group.id": s.group_id, "client.id": f"{s.name}-{i}"}
        source = KafkaSource(
            conf,
            topics,
            app.processor,
            backpressure=s.backpressure,
            timeouts=s.timeouts,
            exactly_once=replica(s.exactly_once, i),
            metrics=app.metrics,
            name=f"laneway-consumer-{i}",
            log_name=f"laneway-consumer-{i}" if s.consumers > 1 else None,
            on_fatal=app._on_fatal,
            producer_config=app._producer_config(),
        )
        app.sources.append(source)
        source.start()
    # the wait for the group counts from here: a start that hangs, then fails (init_transactions
    # past 5 s), says only its error
    joins.start()
    # said once the consumers started: a start that fails says only its error
    if server is not None and (wanted := s.metrics_server) is not None:
        logger.info("metrics and health on http://%s:%d", wanted.host, server.port)
    started = "%s started: %d consumer(s), concurrency %d, topics %s"
    logger.info(started, s.name, s.consumers, s.concurrency, topics)


def traced_handlers(app: App) -> dict[str, HandlerSpec]:
    """The handlers the engine runs: wrapped in spans when tracing is on (docs/tracing.md)."""
    if (t := app.settings.tracing) is None:
        return app.handlers
    from laneway.monitor.tracing import traced

    return {
        topic: traced(
            spec,
            group=app.settings.group_id,
            tracer_provider=t.tracer_provider,
            producer_as_parent=t.producer_as_parent,
            max_key_length=t.max_key_length,
        )
        for topic, spec in app.handlers.items()
    }


def health(app: App) -> str | None:
    """None when healthy, else the reason: ``stopping`` and ``stopped`` for an app asked
    to stop (a drain is not a crash), ``halted: ...`` for a halt."""
    if app.fatal is not None:
        return f"halted: {app.fatal}"
    if (state := app.state) in ("stopping", "stopped"):
        return state
    if app.processor is not None and (problem := app.processor.alive()):
        return problem
    now = time.monotonic()
    beat = app.processor.loop_heartbeat if app.processor is not None else None
    if beat is not None and now - beat > app.settings.timeouts.stall:
        return (
            f"the asyncio worker loop has not run for {now - beat:.0f}s "
            "(an async def handler blocking it: a time.sleep, a blocking client call)"
        )
    for src in app.sources:
        if not src.alive:
            return "a consumer thread has stopped"
        if now - src.heartbeat > app.settings.timeouts.stall:
            return f"consumer loop has not advanced for {now - src.heartbeat:.0f}s"
        if src.lost_group:
            return "a consumer lost its group membership"
    return app.status.stalled()


def close(app: App) -> None:
    try:
        processor = app.processor
        for src in app.sources:
            src.drain()
        drained = True
        if processor is not None and app.fatal is None:
            drained = processor.drain(app.settings.timeouts.shutdown)
            if not drained:
                logger.warning(
                    "shutdown: %d event(s) unfinished after %.0fs; they will be redelivered",
                    processor.events_in_memory,
                    app.settings.timeouts.shutdown,
                )
        # past the drain's deadline nobody waits for running events again (the consumers' closing
        # revoke, the workers): the exit comes within timeouts.shutdown plus the final commits
        for src in app.sources:
            src.stop(revoke_timeout=None if drained else 0.0)
        for src in app.sources:
            src.join(app.settings.timeouts.revoke + 10)
        if processor is not None:
            processor.close(timeout=10.0 if drained else 1.0)
        if app._dead_letters is not None:
            app._dead_letters.close()
        if app._server is not None:
            app._server.stop()
        app.status.stop()
    finally:
        if app._gc_tuned:  # the collector as it was: frozen objects are never finalized, not even at exit
            app._gc_tuned = False
            restore_gc()
