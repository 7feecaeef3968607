"""One contender run in a fresh process: ``python -m bench.child SPEC.json RESULT.json``.

Standard library only at import time (the quix venv runs it too).
"""

from __future__ import annotations

import importlib
import json
import logging
import resource
import sys
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
        switches=ru.ru_nvcsw + ru.ru_nivcsw,  # context switches: waits for the GIL, a lock, the client
        error=error,
    )
    with open(result_path, "w") as f:
        json.dump(out, f)
    return 0 if error is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
