"""The public API: declare an app, register handlers, run it.

from laneway import App, Retry

app = App("orders", bootstrap_servers="127.0.0.1:9092")

@app.handler("orders", retry=Retry(max_attempts=5))
async def handle(event):
    await save(event.key, event.value)

app.run()          # until SIGINT/SIGTERM; or: laneway run mymodule:app
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any, Final, Literal, TypeVar

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from laneway.engine.handlers import HandlerFn, HandlerSpec
from laneway.engine.policies import Backpressure, Delay, OnFailure, Ordering, Retry
from laneway.engine.processor import Processor
from laneway.errors import ConfigError
from laneway.kafka.dlq import KafkaDeadLetters
from laneway.kafka.source import KafkaSource
from laneway.monitor.metrics import HealthServer, PrometheusMetrics

__all__ = ["App", "AppSettings"]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=HandlerFn)


#: librdkafka keys ``kafka_config`` may not set (``enable.auto.*`` may be given as false)
RESERVED_KAFKA_KEYS: Final[dict[str, str]] = {
    "enable.auto.commit": "an automatic commit would pass records still in process (the commit rule)",
    "enable.auto.offset.store": "an automatic commit would pass records still in process (the commit rule)",
    "group.id": "use group_id",
    "transactional.id": "use transactional_id",
}


class AppSettings(BaseModel):
    """Validated app settings; an error names the field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    bootstrap_servers: str = Field(min_length=1)
    group_id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._\-]+$")
    consumers: int = Field(default=1, ge=1, le=64)
    concurrency: int = Field(default=64, ge=1, le=10_000)
    #: the asyncio pool's loop: uvloop when installed, or one of the two explicitly
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    #: tune the interpreter's garbage collector for a stream of short-lived events (see tune_gc)
    gc_tuning: bool = True
    commit_interval: float = Field(default=1.0, gt=0)
    shutdown_timeout: float = Field(default=30.0, ge=0)
    revoke_timeout: float = Field(default=10.0, ge=0)
    stall_timeout: float = Field(default=60.0, gt=0)
    startup_timeout: float = Field(default=10.0, gt=0)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    #: the address /metrics and /healthz listen on: "0.0.0.0" for a scraper on another host
    metrics_host: str = Field(default="127.0.0.1", min_length=1)
    exactly_once: bool = False
    transactional_id: str | None = Field(default=None, min_length=1)
    kafka_config: dict[str, Any] = Field(default_factory=dict)

    @field_validator("kafka_config")
    @classmethod
    def _not_reserved(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, why in RESERVED_KAFKA_KEYS.items():
            if key in v and not (key.startswith("enable.auto.") and str(v[key]).lower() in ("false", "0")):
                raise ValueError(f"{key!r} is Laneway's to set: {why}")
        return v

    @field_validator("bootstrap_servers")
    @classmethod
    def _hosts(cls, v: str) -> str:
        for part in v.split(","):
            host, _, port = part.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port], got {v!r}")
        return v


#: the youngest generation is collected after this many allocations (CPython's default: 700)
GC_THRESHOLD = (20_000, 20, 20)


def tune_gc() -> None:
    """Tune CPython's collector for a stream of short-lived events (``gc_tuning=True``).

    Every record allocates a few objects that live for milliseconds. At the default
    threshold (700) the collector runs every ~100 records and finds most of them still
    alive, so it scans them, promotes them, and scans them again a generation up. At 20,000
    most are gone before it looks. ``gc.freeze()`` moves what start-up allocated (modules,
    settings, the handlers' state) out of reach of full collections. Measured: +24%
    records/s for a no-op handler (BENCHMARKS.md). Cyclic garbage lives a little longer;
    reference counting frees everything else at once, as before. Process-wide: an app
    that shares its process with code tuned otherwise passes ``gc_tuning=False``.
    """
    gc.collect()  # what start-up left as garbage is freed, not frozen
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


class App:
    """A Laneway application: handlers per topic, a processor pool, consumer threads."""

    def __init__(
        self,
        name: str,
        *,
        bootstrap_servers: str,
        group_id: str | None = None,
        consumers: int = 1,
        concurrency: int = 64,
        event_loop: Literal["auto", "asyncio", "uvloop"] = "auto",
        gc_tuning: bool = True,
        backpressure: Backpressure | None = None,
        commit_interval: float = 1.0,
        shutdown_timeout: float = 30.0,
        revoke_timeout: float = 10.0,
        stall_timeout: float = 60.0,
        startup_timeout: float = 10.0,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        exactly_once: bool = False,
        transactional_id: str | None = None,
        kafka_config: dict[str, Any] | None = None,
    ) -> None:
        try:
            self.settings = AppSettings(
                name=name,
                bootstrap_servers=bootstrap_servers,
                group_id=group_id if group_id is not None else name,
                consumers=consumers,
                concurrency=concurrency,
                event_loop=event_loop,
                gc_tuning=gc_tuning,
                commit_interval=commit_interval,
                shutdown_timeout=shutdown_timeout,
                revoke_timeout=revoke_timeout,
                stall_timeout=stall_timeout,
                startup_timeout=startup_timeout,
                metrics_port=metrics_port,
                metrics_host=metrics_host,
                exactly_once=exactly_once,
                transactional_id=transactional_id,
                kafka_config=kafka_config or {},
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ConfigError(".".join(str(p) for p in first["loc"]), first["msg"]) from None
        if backpressure is not None and not isinstance(backpressure, Backpressure):
            raise ConfigError("backpressure", f"must be a Backpressure(...), got {backpressure!r}")
        self.backpressure = backpressure or Backpressure()
        self.handlers: dict[str, HandlerSpec] = {}
        self.metrics = PrometheusMetrics()
        self.processor: Processor | None = None
        self.sources: list[KafkaSource] = []
        self._dead_letters: KafkaDeadLetters | None = None
        self._server: HealthServer | None = None
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self.fatal: BaseException | None = None

    # ------------------------------------------------------------------ registration

    def handler(
        self,
        topic: str,
        *,
        ordering: Ordering = "key",
        retry: Retry | None = None,
        delay: Delay | float | None = None,
        on_failure: OnFailure = "dead_letter",
        dead_letter_topic: str | None = None,
        deserializer: Callable[[bytes | None], Any] | Literal["json"] | None = None,
        timeout: float | None = None,
    ) -> Callable[[F], F]:
        """Register ``fn(event)`` (plain or ``async def``) for ``topic``.

        ``delay`` in seconds (or a :class:`Delay`): not before the record's timestamp plus it.
        ``deserializer="json"`` decodes the value into ``event.payload``; a value that does not
        decode is dead-lettered at once with reason ``deserialize``.
        """

        def register(fn: F) -> F:
            self.add_handler(
                HandlerSpec(
                    topic=topic,
                    fn=fn,
                    ordering=ordering,
                    retry=Retry() if retry is None else retry,
                    delay=delay if delay is None or isinstance(delay, Delay) else Delay(seconds=delay),
                    on_failure=on_failure,
                    dead_letter_topic=dead_letter_topic,
                    deserializer=_deserializer(deserializer),
                    timeout=timeout,
                )
            )
            return fn

        return register

    def add_handler(self, spec: HandlerSpec) -> None:
        if spec.topic in self.handlers:
            raise ConfigError("topic", f"a handler for {spec.topic!r} is already registered")
        self.handlers[spec.topic] = spec

    # ------------------------------------------------------------------ lifecycle

    def _client_config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.settings.bootstrap_servers, **self.settings.kafka_config}

    def check(self) -> None:
        """Fail fast, naming the field: no handlers, no broker, missing topics."""
        if not self.handlers:
            raise ConfigError("handlers", "register at least one handler before running the app")
        quiet = logging.getLogger("laneway.app.check")
        quiet.setLevel(logging.CRITICAL)  # connection-refused lines while probing say nothing new
        try:
            admin = AdminClient(
                {**self._client_config(), "socket.connection.setup.timeout.ms": 3000}, logger=quiet
            )
            # librdkafka validates consumer and producer properties only when such a client is built
            probe = {**self._client_config(), "group.id": self.settings.group_id}
            Consumer(probe, logger=quiet).close()
            Producer(self._client_config(), logger=quiet)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            text = err.str() if hasattr(err, "str") else str(err)
            raise ConfigError("kafka_config", text) from None
        try:
            md = admin.list_topics(timeout=self.settings.startup_timeout)
        except KafkaException as exc:
            raise ConfigError(
                "bootstrap_servers",
                f"no broker answered at {self.settings.bootstrap_servers} within "
                f"{self.settings.startup_timeout:.0f}s ({exc.args[0] if exc.args else exc})",
            ) from None
        for spec in self.handlers.values():
            if spec.topic not in md.topics:
                raise ConfigError(
                    "topic",
                    f"topic {spec.topic!r} does not exist (create it: laneway topics create {spec.topic})",
                )
            if spec.on_failure == "dead_letter" and spec.dlq_topic not in md.topics:
                raise ConfigError(
                    "dead_letter_topic",
                    f"dead-letter topic {spec.dlq_topic!r} for {spec.topic!r} does not exist "
                    f"(create it: laneway topics create {spec.dlq_topic}; or set on_failure='halt')",
                )

    def start(self) -> App:
        """Check the configuration, then start the workers, consumers and the HTTP endpoint."""
        self.check()
        s = self.settings
        if s.metrics_port is not None:
            # first: a port in use fails the start, naming the field, before anything runs
            try:
                server = HealthServer(self.metrics.registry, self.health, s.metrics_port, host=s.metrics_host)
            except OSError as exc:
                raise ConfigError(
                    "metrics_port",
                    f"cannot serve on {s.metrics_host}:{s.metrics_port}: {exc.strerror or exc}",
                ) from None
            self._server = server.start()
            logger.info("metrics and health on http://%s:%d", s.metrics_host, server.port)
        if s.gc_tuning:
            tune_gc()
        self._dead_letters = KafkaDeadLetters(self._client_config())
        self.processor = Processor(
            self.handlers,
            concurrency=s.concurrency,
            event_loop=s.event_loop,
            dead_letters=self._dead_letters,
            metrics=self.metrics,
            on_fatal=self._on_fatal,
        )
        topics = sorted(self.handlers)
        for i in range(s.consumers):
            conf = {**self._client_config(), "group.id": s.group_id, "client.id": f"{s.name}-{i}"}
            source = KafkaSource(
                conf,
                topics,
                self.processor,
                backpressure=self.backpressure,
                commit_interval=s.commit_interval,
                revoke_timeout=s.revoke_timeout,
                metrics=self.metrics,
                name=f"laneway-consumer-{i}",
                on_fatal=self._on_fatal,
                producer_config=self._client_config(),
                exactly_once=s.exactly_once,
                transactional_id=f"{s.transactional_id}-{i}" if s.transactional_id else None,
            )
            self.sources.append(source)
            source.start()
        logger.info(
            "%s started: %d consumer(s), concurrency %d, topics %s",
            s.name,
            s.consumers,
            s.concurrency,
            topics,
        )
        return self

    @property
    def metrics_port(self) -> int | None:
        return self._server.port if self._server else None

    def _on_fatal(self, error: BaseException) -> None:
        if self.fatal is None:
            self.fatal = error
        self._stopping.set()

    def health(self) -> str | None:
        """None when healthy, else the reason."""
        if self.fatal is not None:
            return f"halted: {self.fatal}"
        if self.processor is not None and (problem := self.processor.alive()):
            return problem
        now = time.monotonic()
        beat = self.processor.loop_heartbeat if self.processor is not None else None
        if beat is not None and now - beat > self.settings.stall_timeout:
            return (
                f"the asyncio worker loop has not run for {now - beat:.0f}s "
                "(an async def handler blocking it: a time.sleep, a blocking client call)"
            )
        for src in self.sources:
            if not src.alive:
                return "a consumer thread has stopped"
            if now - src.heartbeat > self.settings.stall_timeout:
                return f"consumer loop has not advanced for {now - src.heartbeat:.0f}s"
            if src.lost_group:
                return "a consumer lost its group membership"
        return None

    def stop(self) -> None:
        """Ask a running app to shut down gracefully (returns at once)."""
        self._stopping.set()

    def shutdown(self) -> None:
        """Stop fetching, finish queued work within ``shutdown_timeout``, commit, close."""
        if self._stopped.is_set():
            return
        processor = self.processor
        for src in self.sources:
            src.drain()
        drained = True
        if processor is not None and self.fatal is None:
            drained = processor.drain(self.settings.shutdown_timeout)
            if not drained:
                logger.warning(
                    "shutdown: %d event(s) unfinished after %.0fs; they will be redelivered",
                    processor.events_in_memory,
                    self.settings.shutdown_timeout,
                )
        # past the drain's deadline nobody waits for running events again (the consumers' closing
        # revoke, the workers): the exit comes within shutdown_timeout plus the final commits
        for src in self.sources:
            src.stop(revoke_timeout=None if drained else 0.0)
        for src in self.sources:
            src.join(self.settings.revoke_timeout + 10)
        if processor is not None:
            processor.close(timeout=10.0 if drained else 1.0)
        if self._dead_letters is not None:
            self._dead_letters.close()
        if self._server is not None:
            self._server.stop()
        self._stopped.set()
        logger.info("%s stopped", self.settings.name)

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Run until SIGINT/SIGTERM or :meth:`stop`; re-raise a fatal error after shutting down."""
        if install_signal_handlers and threading.current_thread() is threading.main_thread():

            def on_signal(signum: int, frame: FrameType | None) -> None:
                logger.info("received %s: shutting down", signal.Signals(signum).name)
                self._stopping.set()

            signal.signal(signal.SIGINT, on_signal)
            signal.signal(signal.SIGTERM, on_signal)
        self.start()
        try:
            while not self._stopping.wait(0.5):
                pass
        finally:
            self.shutdown()
        if self.fatal is not None:
            raise self.fatal

    def run_until(self, done: Callable[[], bool], timeout: float) -> bool:
        """Start, wait until ``done()`` or ``timeout`` seconds, shut down. True when done."""
        self.start()
        deadline = time.monotonic() + timeout
        ok = False
        try:
            while time.monotonic() < deadline and not self._stopping.is_set():
                if done():
                    ok = True
                    break
                time.sleep(0.05)
        finally:
            self.shutdown()
        if self.fatal is not None:
            raise self.fatal
        return ok

    def __enter__(self) -> App:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()


def _json(value: bytes | None) -> Any:
    import orjson

    if value is None:
        raise ValueError("null value")
    return orjson.loads(value)


def _deserializer(
    deserializer: Callable[[bytes | None], Any] | Literal["json"] | None,
) -> Callable[[bytes | None], Any] | None:
    """The handler's ``deserializer`` option: ``"json"``, a function of the value, or None."""
    if isinstance(deserializer, str):
        if deserializer != "json":
            raise ConfigError(
                "deserializer", f"must be 'json' or a function of the value bytes, got {deserializer!r}"
            )
        return _json
    return deserializer
