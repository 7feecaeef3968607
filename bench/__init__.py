"""Laneway's benchmarks: the engine against a raw consume loop and its peers (issue 6).

Off by default; ``make bench`` runs ``python -m bench --mode quick`` (``BENCH_MODE=full`` for
the long run). Every contender runs as its own process, from the beginning of the same
pre-produced topic, with its own consumer group; see ``BENCHMARKS.md``.
"""
