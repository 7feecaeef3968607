"""The Spark profile's classifier reads ``jfr print`` output as JDK 17 writes it."""

from __future__ import annotations

from bench.spark_profile import classify


def _sample(thread: str, *frames: str) -> str:
    lines = "\n".join(f"    {f}(Object) line: 1" for f in frames)
    return (
        "jdk.ExecutionSample {\n"
        "  startTime = 17:42:18.041\n"
        f'  sampledThread = "{thread}" (javaThreadId = 991)\n'
        '  state = "STATE_RUNNABLE"\n'
        f"  stackTrace = [\n{lines}\n  ]\n}}\n\n"
    )


def test_samples_are_split_by_thread_and_by_operation() -> None:
    task = "Executor task launch worker for task 3.0 in stage 7.0 (TID 41)"
    text = "".join(
        [
            _sample(
                task,
                "org.apache.parquet.column.values.dictionary.DictionaryValuesWriter.shouldFallBack",
                "org.apache.spark.sql.execution.datasources.FileFormatDataWriter.write",
                "org.apache.spark.sql.execution.datasources.FileFormatWriter$.executeTask",
            ),
            _sample(
                task,
                "com.fasterxml.jackson.core.json.ReaderBasedJsonParser.nextToken",
                "org.apache.spark.shuffle.sort.BypassMergeSortShuffleWriter.write",
            ),
            _sample(task, "java.util.HashMap.get"),
            _sample(
                "Thread-683",
                "java.util.regex.Matcher.find",
                "org.apache.spark.sql.catalyst.expressions.codegen.CodeFormatter$.stripExtraNewLinesAndComments",
                "py4j.GatewayConnection.run",
            ),
            _sample(
                "stream execution thread for laneway-pipeline-x [id = 1, runId = 2]",
                "org.apache.spark.sql.delta.SnapshotManagement.getSnapshotAt",
            ),
        ]
    )
    n, threads, ops = classify(text)
    assert n == 5
    assert threads["Spark tasks"] == 3
    assert threads["stream execution thread"] == 1
    assert sum(threads.values()) == 5
    assert ops == {
        "task: Parquet and Delta file writes": 1,
        "task: Kafka read, JSON parse, the batch's shuffle": 1,
        "task: other": 1,
        # the first matching component wins: generated code before py4j, which is on every callback
        "other threads: generated code: source text (CodeFormatter)": 1,
        "other threads: Delta log and snapshots": 1,
    }


def test_no_samples() -> None:
    assert classify("jdk.CPULoad {\n  jvmUser = 1.0%\n}\n") == (0, {}, {})
