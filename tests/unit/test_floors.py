"""Imports go down the floors only (read from the source with ast; nothing is imported).

    laneway/errors.py (a leaf) <- laneway/engine <- laneway/kafka <- laneway/monitor
        <- laneway/app.py, running.py, settings.py, registration.py, lifecycle.py (and the package's __init__)
            <- laneway/spark
            <- laneway/catalog
        <- laneway/ops, laneway/demo.py, laneway/__main__.py (the top floor: the command lines, the broker
           launcher)

A module may import its own floor and the floors below it; spark and catalog stand side by
side above the app and import neither each other nor ops. laneway/engine never imports
confluent_kafka. Every import counts: at the top of a module, inside a function, or under
``if TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import laneway

ROOT = Path(laneway.__file__).parent

#: the leaves: the exception tree, the jar fetcher (used by the broker launcher and Spark), and
#: the Ctrl-C handling of the app and the commands
_BASE = frozenset({"errors", "jars", "interrupts"})
#: each floor and the floors it may import (its own included)
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset({"errors"}),
    "jars": _BASE,
    "interrupts": frozenset({"interrupts"}),
    "engine": _BASE | {"engine"},
    "kafka": _BASE | {"engine", "kafka"},
    "monitor": _BASE | {"engine", "kafka", "monitor"},
    "app": _BASE | {"engine", "kafka", "monitor", "app"},
    "spark": _BASE | {"engine", "kafka", "monitor", "app", "spark"},
    "catalog": _BASE | {"engine", "kafka", "monitor", "app", "catalog"},
    "ops": _BASE | {"engine", "kafka", "monitor", "app", "spark", "catalog", "ops"},
}


def floor_of(module: str) -> str:
    """The floor of a laneway module (``laneway.kafka.admin`` -> ``kafka``)."""
    parts = module.split(".")
    assert parts[0] == "laneway", module
    if len(parts) == 2 and not (ROOT / parts[1]).is_dir() and not (ROOT / f"{parts[1]}.py").is_file():
        return "app"  # a name the package's __init__ exports (from laneway import App)
    if len(parts) == 1 or parts[1] in ("app", "running", "settings", "registration", "lifecycle"):
        return "app"  # the package's __init__ exports the app's names
    if parts[1] in ("demo", "__main__"):  # python -m laneway: the command line
        return "ops"
    assert parts[1] in ALLOWED, f"{module}: no floor for laneway.{parts[1]}; add it to ALLOWED"
    return parts[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str | None = None) -> list[str]:
    """Every module ``path`` (module ``name``) imports; ``from a.b import c`` gives ``a.b.c``
    (c may be a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found += [f"{base}.{alias.name}" if alias.name != "*" else base for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value.startswith("laneway")
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))
            )
        ):
            found.append(node.args[0].value)  # importlib.import_module("laneway....")
    return found


def modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def violations() -> list[tuple[str, str]]:
    out = []
    for path in modules():
        name = module_name(path)
        allowed = ALLOWED[floor_of(name)]
        for target in imports_of(path):
            if target.split(".")[0] != "laneway":
                continue
            if floor_of(target) not in allowed:
                # the importing module, and the module it imports (not the name it takes from it)
                out.append((name, _module_part(target)))
    return sorted(set(out))


def _module_part(target: str) -> str:
    """``laneway.ops.bootstrap.Bootstrap`` -> ``laneway.ops.bootstrap`` (the longest existing module)."""
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ROOT.parent.joinpath(*parts[:end])
        if candidate.with_suffix(".py").exists() or (candidate / "__init__.py").exists():
            return ".".join(parts[:end])
    return target


def test_every_module_has_a_floor() -> None:
    names = [module_name(p) for p in modules()]
    assert "laneway.errors" in names and "laneway.app" in names
    for name in names:
        floor_of(name)  # raises for a package no floor names


def test_imports_go_down_the_floors() -> None:
    found = violations()
    for module, target in found:
        print(f"{module} ({floor_of(module)}) imports {target} ({floor_of(target)})")
    assert found == [], "imports that go up or sideways (printed above as module, import)"


def test_engine_does_not_import_confluent_kafka() -> None:
    found = [
        (module_name(path), target)
        for path in sorted((ROOT / "engine").rglob("*.py"))
        for target in imports_of(path)
        if target.split(".")[0] == "confluent_kafka"
    ]
    for module, target in found:
        print(f"{module} imports {target}")
    assert found == []


def test_lazy_and_relative_imports_count(tmp_path: Path) -> None:
    sample = tmp_path / "mod.py"
    sample.write_text(
        "import os\nfrom . import x\nfrom ..engine.events import Event\n"
        "def f() -> None:\n    from laneway.ops import cli\n"
    )
    assert imports_of(sample, "laneway.kafka.mod") == [
        "os",
        "laneway.kafka.x",
        "laneway.engine.events.Event",
        "laneway.ops.cli",
    ]
    assert floor_of("laneway") == "app" and floor_of("laneway.demo") == "ops"
    assert _module_part("laneway.ops.bootstrap.Bootstrap") == "laneway.ops.bootstrap"


def test_imports_written_as_strings_and_package_names_are_seen(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        "import importlib\nfrom laneway import App\n"
        "def f():\n    return importlib.import_module('laneway.ops.cli')\n"
    )
    found = imports_of(module, "laneway.engine.probe")
    assert "laneway.ops.cli" in found and "laneway.App" in found
    assert floor_of("laneway.App") == "app"
