"""The public API: declare an app, register handlers, run it.

from laneway import App, Retry, Timeouts

app = App("orders", bootstrap_servers="127.0.0.1:9092", timeouts=Timeouts(shutdown=60))

@app.handler("orders", retry=Retry(max_attempts=5))
async def handle(event):
    await save(event.key, event.value)

app.run()          # until SIGINT/SIGTERM; or: laneway run mymodule:app
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

from laneway import running
from laneway.engine.handlers import HandlerFn, HandlerSpec
from laneway.engine.policies import (
    Backpressure,
    Delay,
    ExactlyOnce,
    MetricsServer,
    OnFailure,
    Ordering,
    Retry,
    Timeouts,
)
from laneway.engine.processor import Processor
from laneway.errors import ConfigError
from laneway.interrupts import graceful_interrupts
from laneway.kafka import secrets
from laneway.kafka.client_config import load_client_config
from laneway.kafka.closing import quietly
from laneway.kafka.dlq import KafkaDeadLetters
from laneway.kafka.preflight import preflight
from laneway.kafka.source import KafkaSource
from laneway.lifecycle import AppState, AppStateError, Lifecycle
from laneway.monitor.metrics import HealthServer, PrometheusMetrics
from laneway.monitor.status import StatusBoard
from laneway.registration import check_handler, check_topic, deserializer_of
from laneway.settings import AppSettings, Tracing, shared_client_config, upgrade_keywords

__all__ = ["App", "AppSettings", "AppState", "AppStateError"]

logger = logging.getLogger(__name__)

#: the log lines' format on stderr (``App.run`` with no logging set up, and the commands)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

F = TypeVar("F", bound=HandlerFn)


class App:
    """A Laneway application: handlers per topic, a processor pool, consumer threads.

    Options are grouped into frozen policy objects: :class:`Backpressure`, :class:`Timeouts`,
    :class:`MetricsServer`, :class:`ExactlyOnce` (docs/configuration.md lists every one). The
    keywords they replace (``commit_interval``, ``shutdown_timeout``, ``metrics_port``,
    ``exactly_once=True``, ``transactional_id`` ...: see
    :data:`laneway.settings.DEPRECATED_KEYWORDS`) still work for one release, with a
    :class:`~laneway.errors.LanewayDeprecationWarning`, shown by default.
    """

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
        timeouts: Timeouts | None = None,
        metrics_server: MetricsServer | None = None,
        exactly_once: ExactlyOnce | None = None,
        kafka_config: dict[str, Any] | None = None,
        producer_config: dict[str, Any] | None = None,
        tracing: Tracing | bool | None = None,
        client_config: str | Path | None = None,
        **deprecated: Any,
    ) -> None:
        _require("backpressure", backpressure, Backpressure)
        _require("timeouts", timeouts, Timeouts)
        _require("metrics_server", metrics_server, MetricsServer)
        if not isinstance(exactly_once, bool):  # a bool is the deprecated form, upgraded below
            _require("exactly_once", exactly_once, ExactlyOnce)
        if not isinstance(tracing, bool):
            _require("tracing", tracing, Tracing)
        timeouts, metrics_server, exactly_once = upgrade_keywords(
            deprecated, timeouts, metrics_server, exactly_once, kafka_config, producer_config
        )
        # a properties file (Kafka's --command-config format): the base kafka_config overrides
        from_file = load_client_config(client_config) if client_config is not None else {}
        file_only = set(from_file) - set(kafka_config or {})  # a shared file may hold producer keys
        kafka_config = {**from_file, **(kafka_config or {})}
        for given in (kafka_config, producer_config or {}):
            secrets.remember(given)
        self.settings = AppSettings.checked(dict(
            name=name,
            bootstrap_servers=bootstrap_servers,
            group_id=group_id if group_id is not None else name,
            consumers=consumers,
            concurrency=concurrency,
            event_loop=event_loop,
            gc_tuning=gc_tuning,
            backpressure=backpressure or Backpressure(),
            timeouts=timeouts or Timeouts(),
            metrics_server=metrics_server,
            exactly_once=exactly_once,
            kafka_config=kafka_config,
            producer_config=producer_config or {},
            tracing=Tracing() if tracing is True else tracing or None,
        ), file_only, origins={key: "client_config" for key in file_only})  # fmt: skip
        if self.settings.tracing is not None:
            try:
                import laneway.monitor.tracing  # noqa: F401
            except ImportError as exc:
                raise ConfigError("tracing", f"needs pip install 'laneway[otel]' ({exc})") from None
        self.handlers: dict[str, HandlerSpec] = {}
        self.metrics = PrometheusMetrics()
        self.processor: Processor | None = None
        #: ``/status``, the stall check and the per-partition gauges (laneway.monitor.status)
        self.status = StatusBoard(
            name=name,
            group=self.settings.group_id,
            metrics=self.metrics,
            processor=lambda: self.processor,
            paused=self._paused_partitions,
            caps=(self.settings.backpressure.max_events, self.settings.backpressure.max_bytes),
            stall=self.settings.timeouts.stall,
            delays={t: s.delay.seconds for t, s in self.handlers.items() if s.delay is not None},
            hot_keys=self.metrics.hot_keys,
        )
        self.status.health = self.health  # the laneway_healthy gauge
        self.metrics.registry.register(self.status.collector())
        self.sources: list[KafkaSource] = []
        self._dead_letters: KafkaDeadLetters | None = None
        self._server: HealthServer | None = None
        self._gc_tuned = False  # this app's start tuned the collector (running.close restores it)
        #: the start got as far as its "started" line: the shutdown then says "stopped" at INFO (a
        #: start that failed says only its error: the command's one line)
        self._launched = False
        self._life = Lifecycle(name)
        self.fatal: BaseException | None = None

    def __repr__(self) -> str:
        s = self.settings
        return f"App({s.name!r}, bootstrap_servers={s.bootstrap_servers!r}, group_id={s.group_id!r})"

    @property
    def backpressure(self) -> Backpressure:
        return self.settings.backpressure

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
        conflate: bool = False,
    ) -> Callable[[F], F]:
        """Register ``fn(event)`` (plain or ``async def``) for ``topic``.

        ``delay`` in seconds (or a :class:`Delay`): not before the record's timestamp plus it.
        ``deserializer="json"`` decodes the value into ``event.payload``; a value that does not
        decode (a null one, a tombstone, too) is dead-lettered at once, reason ``deserialize``.
        ``conflate=True`` (key ordering, for records that are full snapshots of their key): when
        several of a key's records wait, only the newest runs and the older count as done
        (records without a key each run).
        A plain ``fn`` may run on several threads at once, for different keys: it must be
        thread-safe (a key's own records still run one at a time, in offset order).
        """
        check_topic(topic)  # a bare @app.handler passes the function

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
                    deserializer=deserializer_of(deserializer),
                    timeout=timeout,
                    conflate=conflate,
                )
            )
            return fn

        return register

    def add_handler(self, spec: HandlerSpec) -> None:
        """Register ``spec``; a handler that cannot be called with one event raises
        :class:`~laneway.registration.HandlerSignatureError` (a ``ConfigError`` and a ``TypeError``),
        a dead-letter topic that leads back to ``spec.topic`` a ``ConfigError``."""
        check_handler(spec, self.handlers)
        self.handlers[spec.topic] = spec

    # ------------------------------------------------------------------ lifecycle

    def _client_config(self) -> dict[str, Any]:
        """The consumers' configuration (and the admin client's): ``bootstrap_servers`` over a
        ``bootstrap.servers`` in ``kafka_config`` or a client-config file, so the address an
        error names is the one connected to."""
        return {**self.settings.kafka_config, "bootstrap.servers": self.settings.bootstrap_servers}

    def _producer_config(self) -> dict[str, Any]:
        """The producers' configuration: the shared settings of ``kafka_config``, then
        ``producer_config`` (:func:`laneway.settings.shared_client_config`)."""
        s = self.settings
        return {
            **shared_client_config(s.kafka_config),
            **s.producer_config,
            "bootstrap.servers": s.bootstrap_servers,
        }

    def check(self) -> None:
        """Fail fast, naming the field: no handlers, no broker, refused access, missing topics
        (:func:`laneway.kafka.preflight.preflight`)."""
        if not self.handlers:
            raise ConfigError("handlers", "register at least one handler before running the app")
        s = self.settings
        preflight(
            self._client_config(),
            self._producer_config(),
            group_id=s.group_id,
            bootstrap=s.bootstrap_servers,
            timeout=s.timeouts.startup,
            handlers=list(self.handlers.values()),
        )

    @property
    def state(self) -> AppState:
        """``"new"``, ``"running"``, ``"stopping"`` (a stop was asked: the drain runs) or
        ``"stopped"``. An App runs once."""
        return self._life.state

    def start(self) -> App:
        """Check the configuration, then start the workers, consumers and the HTTP endpoint.

        Returns at once, the app running in the background, until :meth:`stop` (or a halt)
        starts its shutdown; :meth:`shutdown` does it and waits. An App starts once: a second
        ``start()``, or one after the shutdown, raises :class:`AppStateError`. A start that
        fails on a bad setting (a missing topic, no broker, a port in use) may be tried again."""
        self._life.claim_start()
        try:
            self.check()
            server = self._bind_server()
        except BaseException:
            self._life.abandon_start()  # nothing runs yet
            raise
        try:
            self._launch(server)
        except BaseException:
            quietly(self.shutdown, "closing after a failed start failed")  # the start's error is raised
            raise
        self._launched = True
        self._life.watch(self.shutdown)  # a stop() or a halt shuts the app down
        return self

    def _bind_server(self) -> HealthServer | None:
        return running.bind_server(self)

    def _launch(self, server: HealthServer | None) -> None:
        running.launch(self, server)

    @property
    def metrics_port(self) -> int | None:
        return self._server.port if self._server else None

    def _on_fatal(self, error: BaseException) -> None:
        if self.fatal is None:
            self.fatal = error
        self._life.stopping.set()

    def health(self) -> str | None:
        """None when healthy, else the reason: ``stopping`` and ``stopped`` for an app asked
        to stop (a drain is not a crash), ``halted: ...`` for a halt."""
        return running.health(self)

    def _paused_partitions(self) -> dict[tuple[str, int], str]:
        """The partitions the consumers do not fetch now, each with why (``/status``'s ``paused_for``)."""
        out: dict[tuple[str, int], str] = {}
        for src in list(self.sources):
            out.update(src.paused_partitions)
        return out

    def stop(self) -> None:
        """Start a graceful shutdown (:meth:`shutdown`'s, on a daemon thread) and return at once,
        from any thread or a signal handler; ``run()`` waits for it, after :meth:`start` call
        :meth:`shutdown` to wait. Before the start, the app shuts down once it has started."""
        self._life.stopping.set()

    def shutdown(self) -> None:
        """Stop fetching, finish queued work within ``timeouts.shutdown``, commit, leave the
        group, close; return when done. A shutdown already under way (after :meth:`stop`) is
        waited for. Afterwards the app is ``stopped`` and cannot be started again."""
        if not self._life.claim_shutdown():
            # in slices: a signal that lands just before an untimed wait begins is handled only
            # when the wait ends (laneway.interrupts: the second Ctrl-C of a blocked drain)
            while not self._life.stopped.wait(0.1):
                pass
            if self._life.failure is not None:
                raise self._life.failure
            return
        try:
            self._close()
        except BaseException as exc:
            self._life.failure = exc
            raise
        finally:
            self._life.done()
        if self._launched:
            logger.info("%s stopped", self.settings.name)
        else:  # the start failed, and its error says so: "stopped" would be a second line for it
            logger.debug("%s stopped after its start failed", self.settings.name)

    def _close(self) -> None:
        running.close(self)

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Run until SIGINT/SIGTERM or :meth:`stop`; re-raise a fatal error after shutting down.

        With ``install_signal_handlers`` (on the main thread), the first Ctrl-C or SIGTERM
        shuts down gracefully and a second Ctrl-C exits at once with status 130 (see
        :mod:`laneway.interrupts`); the handlers before are back when it returns. A program
        that set up no logging gets Laneway's INFO lines (start, assignments, commits at a
        revoke, dead letters) on stderr, and other libraries' warnings."""
        if not logging.getLogger().handlers:  # a program that set up no logging: Laneway's lines still show
            logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
            if logging.getLogger("laneway").level == logging.NOTSET:
                logging.getLogger("laneway").setLevel(logging.INFO)
        guard = graceful_interrupts(self.stop) if install_signal_handlers else contextlib.nullcontext()
        with guard:
            self.start()
            try:
                while not self._life.stopping.wait(0.5):
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
            while time.monotonic() < deadline and not self._life.stopping.is_set():
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


def _require(field: str, value: object, cls: type) -> None:
    """``value`` is None or a ``cls``; else a :class:`ConfigError` naming ``field``."""
    if value is not None and not isinstance(value, cls):
        raise ConfigError(field, f"must be a {cls.__name__}(...), got {value!r}")
