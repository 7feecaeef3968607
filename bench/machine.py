"""The machine a benchmark run ran on (``machine`` in results.json): cores, memory, CPU model,
load and the versions that matter."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["machine"]

ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict[str, Any]:
    """nproc, memory, CPU model, load and the versions that matter."""
    cpu = ""
    mem_gb = 0.0
    try:
        cpu = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            "",
        )
        mem_kb = next(
            ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")
        )
        mem_gb = int(mem_kb.split()[1]) / 2**20
    except (OSError, StopIteration):
        pass
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str] = {"python": platform.python_version()}
    for dist in ("laneway", "confluent-kafka", "sentry-arroyo", "pyspark", "delta-spark"):
        with contextlib.suppress(PackageNotFoundError):
            versions[dist] = version(dist)
    try:
        import confluent_kafka

        versions["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    quix_py = ROOT / "bench" / ".venv-quix" / "bin" / "python"
    if quix_py.exists():
        q = subprocess.run(
            [
                quix_py,
                "-c",
                "import quixstreams; from importlib.metadata import version as v; "
                'print(quixstreams.__version__, v("confluent-kafka"))',
            ],
            capture_output=True,
            text=True,
        )
        if q.returncode == 0:
            qv, ck = q.stdout.split()
            versions["quixstreams"] = f"{qv} (its own venv, confluent-kafka {ck})"
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    except (OSError, IndexError):
        java = ""
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem_gb, 1),
        "kernel": platform.release(),
        "load_avg_at_start": [round(x, 1) for x in os.getloadavg()],
        "java": java,
        "kafka": "Apache Kafka 4.1, KRaft, one local broker (laneway.ops.broker.LocalBroker)",
        "versions": versions,
    }
