"""What a Spark run costs: the CPU seconds of this process and its children, the JVM's by kind
of thread (Linux ``/proc``), the Spark jobs submitted and the processes started."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any


def _cpu_seconds() -> float:
    """This process and its children (the JVM) so far."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return float(total)


#: JVM thread names (Linux truncates them to 15 characters) -> the kind of work they do. Spark
#: 4.2 renames an idle task thread "Executor task idle worker" (was "... launch worker-N"), and
#: the CPU of a thread is read under the name it has at the end of a run.
_THREAD_KINDS = (("Executor task ", "tasks"), ("C1 CompilerThre", "jit"), ("C2 CompilerThre", "jit"))
_GC_THREADS = ("GC Thread", "G1 ", "VM Thread", "Sweeper thread")


def _thread_kind(name: str) -> str:
    """tasks, jit, gc or other: the kind of work of a JVM thread named ``name`` (as ``/proc`` has it)."""
    kind = next((k for prefix, k in _THREAD_KINDS if name.startswith(prefix)), None)
    return kind or ("gc" if name.startswith(_GC_THREADS) else "other")


def _jvm_cpu() -> dict[str, float] | None:
    """CPU seconds so far of the session's JVM (Linux ``/proc``): ``total`` and its live threads
    by id as (kind, seconds), kind one of tasks (Spark tasks), jit (the JIT compilers), gc (the
    collectors, safepoints, code cache sweeper) or other (driver, scheduler, ...); None elsewhere."""
    import psutil

    jvm = next((c for c in psutil.Process().children(recursive=True) if c.name() == "java"), None)
    if jvm is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, Any] = {"total": float(sum(jvm.cpu_times()[:2])), "threads": {}}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{jvm.pid}/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{jvm.pid}/task/{tid}/stat").read_text()
                name = stat[stat.index("(") + 1 : stat.rindex(")")]
                fields = stat[stat.rindex(")") + 2 :].split()
                out["threads"][tid] = (_thread_kind(name), (int(fields[11]) + int(fields[12])) / tick)
    return out


def _jvm_cpu_split(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, float] | None:
    """The JVM's CPU seconds between two ``_jvm_cpu`` readings by kind of thread; threads that
    ended meanwhile (a query's stream thread, py4j callback threads) count as other."""
    if before is None or after is None:
        return None
    split = dict.fromkeys(("tasks", "jit", "gc", "other"), 0.0)
    for tid, (kind, seconds) in after["threads"].items():
        split[kind] += seconds - before["threads"].get(tid, (kind, 0.0))[1]
    split["other"] += (after["total"] - before["total"]) - sum(split.values())
    return {k: round(max(0.0, v), 1) for k, v in split.items()}


def _jobs_so_far(session: Any) -> int | None:
    """Spark jobs submitted in this session so far (the DAG scheduler's next job id); None if unknown."""
    try:
        return int(session.sparkContext._jsc.sc().dagScheduler().nextJobId())
    except Exception:  # a private field: best effort
        return None


def _processes_started() -> int | None:
    """Processes this machine has started since boot (Linux ``/proc/stat``); None elsewhere."""
    try:
        with open("/proc/stat") as stat:
            for line in stat:
                if line.startswith("processes "):
                    return int(line.split()[1])
    except OSError:
        pass
    return None
