"""One module per contender; each exposes ``run(spec, rec)`` and runs until ``rec.done``."""

from __future__ import annotations

__all__ = ["CONCURRENT", "IN_VENV", "ORDERED", "QUIX", "SAMPLED", "TRACED", "module_for"]

#: contenders that run in the main venv, in report order
IN_VENV = ["raw", "partition-seq", "laneway-key", "laneway-key-async", "laneway-unordered", "arroyo"]
#: ``laneway-key`` with tracing on (the otel extra; spans counted, not exported), for bench.ab
TRACED = "laneway-key-traced"
#: the same with a sampler that keeps 1% of the traces (the others' spans are not recorded)
SAMPLED = "laneway-key-traced-1pct"
#: the one that needs its own venv (quixstreams pins confluent-kafka<2.13)
QUIX = "quix"
#: contenders that promise per-key order (order violations fail their run)
ORDERED = {"raw", "partition-seq", "laneway-key", "laneway-key-async", TRACED, SAMPLED, "quix"}
#: contenders whose concurrency is a setting (the others are fixed by design)
CONCURRENT = {"laneway-key", "laneway-key-async", TRACED, SAMPLED, "laneway-unordered", "arroyo"}


def module_for(contender: str) -> str:
    return {
        "raw": "bench.contenders.raw",
        "partition-seq": "bench.contenders.partition_seq",
        "laneway-key": "bench.contenders.laneway_app",
        "laneway-key-async": "bench.contenders.laneway_app",
        TRACED: "bench.contenders.laneway_app",
        SAMPLED: "bench.contenders.laneway_app",
        "laneway-unordered": "bench.contenders.laneway_app",
        "arroyo": "bench.contenders.arroyo_app",
        "quix": "bench.contenders.quix_app",
    }[contender]
