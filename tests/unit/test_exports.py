"""The public surface is deliberate: changing it should be a visible decision."""

from __future__ import annotations

import importlib
import pkgutil

import laneway


def test_top_level_exports() -> None:
    assert sorted(laneway.__all__) == [
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
    for name in laneway.__all__:
        assert getattr(laneway, name) is not None


def test_every_module_declares_all() -> None:
    missing = []
    for info in pkgutil.walk_packages(laneway.__path__, "laneway."):
        if info.ispkg or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        if not hasattr(module, "__all__"):
            missing.append(info.name)
    assert missing == []


def test_exception_tree_has_one_root() -> None:
    for name in (
        "AppStateError",
        "ConfigError",
        "DeadLetterError",
        "EngineStopped",
        "HandlerFailed",
        "OutputError",
    ):
        assert issubclass(getattr(laneway, name), laneway.LanewayError)


def test_engine_does_not_import_kafka() -> None:
    import ast
    from pathlib import Path

    engine = Path(laneway.__file__).parent / "engine"
    for path in engine.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(n.startswith("confluent_kafka") for n in names), path.name
