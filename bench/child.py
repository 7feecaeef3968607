"""One contender run in a fresh process: ``python -m bench.child SPEC.json RESULT.json``.

Standard library only at import time (the quix venv runs it too).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import resource
import sys
import threading
import time
import traceback
from typing import Any

from bench.contenders import module_for
from bench.workload import Recorder, RunSpec


def main(argv: list[str]) -> int:
    spec_path, result_path = argv
    with open(spec_path) as f:
        spec = RunSpec(**json.load(f))
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    t0 = time.perf_counter()
    rec = Recorder(spec)
    error: str | None = None
    try:
        importlib.import_module(module_for(spec.contender)).run(spec, rec)
    except BaseException:
        error = traceback.format_exc()
    out: dict[str, Any] = rec.result()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    out.update(
        wall_s=time.perf_counter() - t0,
        cpu_s=ru.ru_utime + ru.ru_stime,
        maxrss_mb=ru.ru_maxrss / 1024,
        context_switches=[ru.ru_nvcsw, ru.ru_nivcsw],
        threads_cpu_s=threads_cpu(),
        error=error,
    )
    with open(result_path, "w") as f:
        json.dump(out, f)
    return 0 if error is None else 1


def threads_cpu() -> dict[str, float]:
    """CPU seconds of the threads alive at the end, by kind: a Python thread's name without its
    number, or the OS thread's own name (librdkafka's ``rdk:...``); threads that ended are not
    counted (Linux only: empty elsewhere)."""
    names = {t.native_id: re.sub(r"[-_ ]?\d+$", "", t.name) for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        kind = names.get(int(tid)) or re.sub(r"\d+$", "", comm)
        out[kind] = round(out.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick, 2)
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
