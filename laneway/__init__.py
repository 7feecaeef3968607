"""Laneway: ordered, at-least-once, key-parallel Kafka processing.

The public surface: :class:`App` with its policies, the :class:`Event` handlers receive,
and the exception tree rooted at :class:`LanewayError`. Importing it shows Laneway's
deprecation warnings (:class:`LanewayDeprecationWarning`) by default.
"""

from laneway.app import App, AppSettings
from laneway.engine.events import Event
from laneway.engine.policies import Backpressure, Delay, ExactlyOnce, MetricsServer, Retry, Timeouts
from laneway.errors import (
    ConfigError,
    DeadLetterError,
    EngineStopped,
    HandlerFailed,
    LanewayDeprecationWarning,
    LanewayError,
    show_deprecations,
)
from laneway.kafka.commit import OutputError
from laneway.lifecycle import AppStateError
from laneway.settings import Tracing

__all__ = [
    "App",
    "AppSettings",
    "AppStateError",
    "Backpressure",
    "ConfigError",
    "DeadLetterError",
    "Delay",
    "EngineStopped",
    "Event",
    "ExactlyOnce",
    "HandlerFailed",
    "LanewayDeprecationWarning",
    "LanewayError",
    "MetricsServer",
    "OutputError",
    "Retry",
    "Timeouts",
    "Tracing",
]

__version__ = "0.1.0"

show_deprecations()  # Python hides a DeprecationWarning outside __main__: Laneway's show
