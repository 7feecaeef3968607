"""Which pipeline a MERGE contender runs (``_pipeline``).

This checkout's ``laneway/spark`` modules, or, for ``merge-before``, another checkout's
(``LANEWAY_BENCH_SPARK_BASELINE``) imported beside them, with that checkout's runtime session
settings applied around its runs.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from bench.spark_common import BASELINE_ENV

#: what a MERGE contender is run through, in whichever of its checkout's modules defines it
ENTRY = ("run_pipeline", "PipelineSettings", "PipelineMetrics", "ensure_tables")
#: the modules of ``laneway/spark`` a contender is not run through
_NOT_PIPELINE = frozenset({"__init__", "cli"})


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Imports ``laneway.spark.<name>`` from another checkout's ``laneway/spark`` folder."""

    def __init__(self, folder: Path, names: frozenset[str]) -> None:
        self.folder = folder
        self.names = names

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        package, _, name = fullname.rpartition(".")
        if package != "laneway.spark" or name not in self.names:
            return None
        return importlib.util.spec_from_file_location(fullname, self.folder / f"{name}.py")


def _checkout_modules(root: Path) -> dict[str, ModuleType]:
    """The Spark modules of the checkout at ``root``, by name, importing each other (``from
    laneway.spark.x import ...``, ``from laneway.spark import x``), not this checkout's: for
    the import, this checkout's are set aside in ``sys.modules`` and the ``laneway.spark``
    package, then put back. An import inside a function, run later, would get this checkout's."""
    folder = root / "laneway" / "spark"
    names = frozenset(p.stem for p in folder.glob("*.py")) - _NOT_PIPELINE
    package = importlib.import_module("laneway.spark")
    modules = {n: sys.modules.pop(f"laneway.spark.{n}", None) for n in names}
    attributes = {n: package.__dict__.pop(n, None) for n in names}
    finder = _CheckoutFinder(folder, names)
    sys.meta_path.insert(0, finder)
    try:
        return {n: importlib.import_module(f"laneway.spark.{n}") for n in sorted(names)}
    finally:
        sys.meta_path.remove(finder)
        for n in names:
            sys.modules.pop(f"laneway.spark.{n}", None)
            package.__dict__.pop(n, None)
            if modules[n] is not None:
                sys.modules[f"laneway.spark.{n}"] = modules[n]
            if attributes[n] is not None:
                setattr(package, n, attributes[n])


def _current_modules() -> dict[str, ModuleType]:
    """This checkout's Spark modules, by name."""
    import laneway.spark

    folder = Path(laneway.spark.__path__[0])
    names = sorted(frozenset(p.stem for p in folder.glob("*.py")) - _NOT_PIPELINE)
    return {n: importlib.import_module(f"laneway.spark.{n}") for n in names}


def _entry(modules: Mapping[str, ModuleType]) -> SimpleNamespace:
    """A contender's ``ENTRY`` names, wherever its modules define them, and ``modules``."""
    found = {name: next(vars(m)[name] for m in modules.values() if name in vars(m)) for name in ENTRY}
    return SimpleNamespace(modules=dict(modules), **found)


@functools.cache
def _baseline() -> tuple[SimpleNamespace, dict[str, str]]:
    """The baseline checkout's pipeline (``_entry``) and its runtime session settings."""
    modules = _checkout_modules(Path(os.environ[BASELINE_ENV]))
    conf = modules["session"].SessionSettings(master="local[2]").spark_conf([])
    runtime = {k: v for k, v in conf.items() if k.startswith(("spark.sql.", "spark.databricks.delta."))}
    return _entry(modules), runtime


@contextlib.contextmanager
def _pipeline(session: Any, name: str) -> Any:
    """The pipeline of contender ``name`` (``_entry``), with its session settings applied meanwhile."""
    if name != "merge-before":
        yield _entry(_current_modules())
        return
    module, conf = _baseline()
    saved: dict[str, str | None] = {}
    for key, value in conf.items():
        with contextlib.suppress(Exception):  # static settings cannot change in a running session
            before = session.conf.get(key, None)
            session.conf.set(key, value)
            saved[key] = before
    try:
        yield module
    finally:
        for key, before in saved.items():
            if before is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, before)
