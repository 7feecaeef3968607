"""Where a Spark contender's JVM spends its CPU: ``python -m bench.spark_profile``.

``python -m bench.spark_profile [--contender merge] [--records 300000] [--repeats 2]``
(``LANEWAY_BOOTSTRAP`` or ``--bootstrap``) produces the benchmark's backlog, warms the
contender up twice in one ``local[2]`` session, then records the JVM with Java Flight Recorder
(``jcmd <pid> JFR.start settings=profile``) over ``--repeats`` more runs (the runs alone, not
the benchmark's checks after them) and prints the execution samples by thread and by what
they were doing: on Spark's task threads by operation (Kafka read, JSON parse and the batch's
shuffle; Parquet writes; the cache), on the others (driver, streaming and py4j threads) by
Spark and Delta component (analysis, generated code, Delta's log). ``--jfr FILE`` keeps the
recording (``jfr print --stack-depth 200 --events jdk.ExecutionSample FILE``); ``--from FILE``
only reads an earlier one. A contender without a shuffle (the appends) reads and parses inside
its write tasks: compare shares of the whole, not category by category.

JFR's ``profile`` settings make the JIT busier than in a plain run (the timed runs' records/s are
printed but are not the benchmark's figures); the samples' shares are what this is for.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.spark_common import cli, parse

__all__ = ["classify", "main"]

#: task-thread samples, by the first pattern found anywhere in the stack (order matters)
TASK_OPS = (
    ("Parquet and Delta file writes", r"FileFormatWriter|DeltaFileFormatWriter|ParquetOutputWriter"),
    ("Kafka read, JSON parse, the batch's shuffle", r"ShuffleWriter|ShuffleExternalSorter"),
    ("cache: build", r"CachedRDDBuilder|DefaultCachedBatchSerializer|convertInternalRowToCachedBatch"),
    ("cache: read", r"InMemoryTableScanExec|ColumnAccessor"),
    ("Parquet reads", r"VectorizedParquetRecordReader|FileScanRDD"),
    ("sort", r"UnsafeExternalSorter|SortExec"),
)
#: other threads' samples
DRIVER_OPS = (
    ("generated code: source text (CodeFormatter)", r"CodeFormatter"),
    ("generated code: compile", r"janino|codehaus"),
    ("Delta log and snapshots", r"delta\.(Snapshot|DeltaLog|SnapshotManagement|Checkpoints|LogSegment)"),
    ("analysis", r"catalyst\.analysis|CheckAnalysis"),
    ("optimizer", r"catalyst\.optimizer|SparkOptimizer"),
    ("physical planning", r"QueryPlanner|SparkStrategies|EnsureRequirements|prepareForExecution"),
    ("task serialization", r"ObjectOutputStream|ClosureCleaner"),
    ("scheduler", r"DAGScheduler|TaskSchedulerImpl|TaskSetManager"),
    ("py4j", r"py4j"),
)
_SAMPLE = re.compile(r'sampledThread = "([^"]*)".*?stackTrace = \[(.*?)\n  \]', re.S)
_FRAME = re.compile(r"^\s+(\S+)\(", re.M)


def _thread_kind(name: str) -> str:
    if re.match(r"Thread-\d+$", name):
        return "py4j callbacks (the foreachBatch function's calls into the JVM)"
    return re.sub(r"\s+for\s.*$|[-\s]?\d+.*$", "", name) or name


def classify(text: str) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """``jfr print`` output of execution samples: (samples, by thread kind, by operation)."""
    threads: collections.Counter[str] = collections.Counter()
    ops: collections.Counter[str] = collections.Counter()
    n = 0
    for name, trace in _SAMPLE.findall(text):
        n += 1
        task = name.startswith("Executor task launch")
        threads["Spark tasks" if task else _thread_kind(name)] += 1
        stack = "\n".join(_FRAME.findall(trace))
        table = TASK_OPS if task else DRIVER_OPS
        kind = next((label for label, pat in table if re.search(pat, stack)), "other")
        ops[("task: " if task else "other threads: ") + kind] += 1
    return n, threads, ops


def _report(text: str) -> None:
    n, threads, ops = classify(text)
    if not n:
        print("no execution samples")
        return
    print(f"{n:,} execution samples")
    for label, counter in (("by thread", threads), ("by what they were doing", ops)):
        print(f"\n{label}:")
        for key, v in counter.most_common(16):
            print(f"  {v / n:6.1%}  {key}")


def _record(bootstrap: str, contender: str, records: int, repeats: int, jfr: Path) -> None:
    from bench.kafka_io import Kafka
    from bench.spark_common import _backlog_spec, produce_entities
    from bench.spark_contenders import _warm_up
    from laneway.spark.session import SessionSettings, build_session

    kafka = Kafka(bootstrap)
    topic = kafka.topic("spark-profile", 8)
    versions = produce_entities(bootstrap, topic, records, records // 10)
    spec = _backlog_spec(bootstrap, topic, records, versions, max(1, records // 3))
    session = build_session(SessionSettings(master="local[2]", app_name="laneway-bench-profile"))
    work = Path(tempfile.mkdtemp(prefix="laneway-bench-profile-"))
    try:
        pid = str(session.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        for i in range(2):  # the C2 compiler is busy for minutes in a fresh JVM
            _warm_up(session, spec, contender, work / f"warm-{i}")
        subprocess.run(["jcmd", pid, "JFR.start", "name=laneway", "settings=profile"], check=True)
        for rep in range(repeats):
            # the run alone: the benchmark's checks afterwards (counts, a distinct) are not recorded
            started = time.monotonic()
            _warm_up(session, spec, contender, work / f"run-{rep}")
            rate = records / (time.monotonic() - started)
            print(f"{contender} run {rep}: {rate:,.0f} records/s (under JFR)")
        subprocess.run(["jcmd", pid, "JFR.stop", "name=laneway", f"filename={jfr}"], check=True)
    finally:
        session.stop()
        kafka.delete_all()


def main(argv: list[str]) -> int:
    parser = cli("bench.spark_profile", __doc__.split("\n")[0])
    parser.add_argument("--contender", default="merge", choices=("merge", "append", "append-tuned"))
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--jfr", type=Path, help="keep the recording here")
    parser.add_argument("--from", dest="source", type=Path, help="only read this recording")
    if "--from" in argv:
        args = parser.parse_args(argv)
        jfr = args.source
    else:
        args = parse(parser, argv)
        jfr = args.jfr or Path(tempfile.mkdtemp(prefix="laneway-jfr-")) / "profile.jfr"
        _record(args.bootstrap, args.contender, args.records, args.repeats, jfr)
    printed = subprocess.run(
        ["jfr", "print", "--stack-depth", "200", "--events", "jdk.ExecutionSample", str(jfr)],
        check=True,
        capture_output=True,
        text=True,
    )
    _report(printed.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
