"""The Spark benchmark splits the JVM's CPU by thread name, as ``/proc`` gives it (15 characters)."""

from __future__ import annotations

import pytest

from bench.spark_cpu import _thread_kind


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("Executor task l", "tasks"),  # Spark 4.0: "Executor task launch worker-3", running or idle
        ("Executor task i", "tasks"),  # Spark 4.2: "Executor task idle worker", between tasks
        ("C2 CompilerThre", "jit"),
        ("GC Thread#0", "gc"),
        ("dag-scheduler-e", "other"),
    ],
)
def test_task_threads_count_as_tasks_under_either_name(name: str, kind: str) -> None:
    assert _thread_kind(name) == kind
