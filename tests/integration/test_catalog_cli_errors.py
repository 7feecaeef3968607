"""`laneway catalog ...` and `laneway pipeline run` share the ops commands' --bootstrap rules
(flag, else $LANEWAY_BOOTSTRAP, else the broker `laneway broker start` recorded), fail fast
with one line when no broker answers, and show an example in --help."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from laneway.kafka import admin as ka
from laneway.ops import bootstrap as bootstrap_mod
from laneway.ops import catalog_cli, spark_cli
from laneway.ops.bootstrap import resolve_bootstrap
from laneway.ops.broker import BrokerInfo, free_port
from tests.conftest import TopicFactory


def make_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    catalog_cli.register(app)
    spark_cli.register(app)
    return app


def invoke(*args: str, columns: int = 80) -> Result:
    return CliRunner().invoke(make_app(), list(args), env={"COLUMNS": str(columns)})


def one_line_error(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def _local_broker(bootstrap: str) -> BrokerInfo | None:
    """The record `laneway broker start` would have written for the local broker at ``bootstrap``."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = [a for a in (proc / "cmdline").read_bytes().decode(errors="replace").split("\0") if a]
            if "kafka.Kafka" not in args:
                continue
            props = Path(args[-1])
            if f"advertised.listeners=PLAINTEXT://{bootstrap}\n" in props.read_text():
                return BrokerInfo(pid=int(proc.name), bootstrap=bootstrap, data_dir=str(props.parent))
        except OSError:
            continue
    return None


@pytest.fixture
def recorded_broker(kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """No $LANEWAY_BOOTSTRAP; a LANEWAY_CACHE whose broker record names the test broker."""
    info = _local_broker(kafka_bootstrap)
    if info is None:
        pytest.skip(f"{kafka_bootstrap} is not a local `kafka.Kafka` process this test can record")
    monkeypatch.delenv("LANEWAY_BOOTSTRAP", raising=False)
    monkeypatch.setenv("LANEWAY_CACHE", str(tmp_path))
    info.save(tmp_path / "broker" / "state.json")
    assert resolve_bootstrap(None) == kafka_bootstrap
    return kafka_bootstrap


def test_generate_finds_the_recorded_broker(recorded_broker: str, make_topic: TopicFactory) -> None:
    topic = make_topic(partitions=2, prefix="catalog-cli")
    result = invoke(
        "catalog", "generate", "--topic", topic, "--entities", "20", "--events", "100", "--no-progress"
    )
    assert result.exit_code == 0, result.output
    assert f"produced 100 records (0 invalid) about 20 entities to {topic}" in result.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["catalog", "generate", "--topic", "never-{u}", "--no-progress"],
        ["catalog", "sync", "--changes-topic", "never-{u}", "--entities-topic", "never-e-{u}",
         "--dead-letter-topic", "never-d-{u}", "--group-id", "never-{u}", "--until-caught-up"],
    ],
)  # fmt: skip
def test_catalog_bootstrap_resolves_like_the_ops_commands(
    command: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("LANEWAY_BOOTSTRAP", raising=False)  # so no broker is ever reached
    monkeypatch.setenv("LANEWAY_CACHE", str(tmp_path))
    command = [c.format(u=uuid.uuid4().hex[:10]) for c in command]
    address = f"127.0.0.1:{free_port()}"
    seen: list[str | None] = []

    def resolve(explicit: str | None) -> str:
        seen.append(explicit)
        return address

    monkeypatch.setattr(bootstrap_mod, "resolve_bootstrap", resolve)
    assert address in one_line_error(invoke(*command))
    assert seen == [None]
    seen.clear()
    assert address in one_line_error(invoke(*command, "-b", "h:1"))  # -b, as the ops commands
    assert seen == ["h:1"]


def test_pipeline_run_finds_the_recorded_broker(
    recorded_broker: str, monkeypatch: pytest.MonkeyPatch, make_topic: TopicFactory
) -> None:
    from laneway.spark import pipeline

    topic = make_topic(partitions=1, prefix="entities")

    settings: list[pipeline.PipelineSettings] = []

    def fake_run(s: pipeline.PipelineSettings, **_: object) -> pipeline.PipelineResult:  # no Spark job
        settings.append(s)
        return pipeline.PipelineResult((), 0, 0, None, None)

    monkeypatch.setattr(pipeline, "run_pipeline", fake_run)
    result = invoke("pipeline", "run", "--topic", topic, "--warehouse", "/nonexistent/wh")
    assert result.exit_code == 0, result.output
    assert [s.bootstrap for s in settings] == [recorded_broker]
    # a topic that does not exist: one line naming it, before Spark starts (was 25 s of Java traces)
    missing = invoke("pipeline", "run", "--topic", f"{topic}-missing", "--warehouse", "/nonexistent/wh")
    assert f"{topic}-missing" in one_line_error(missing) and len(settings) == 1

    class Answering:  # h:1 does not answer: skip the broker check, keep the topic check
        def list_topics(self, timeout: float) -> Any:
            return type("Metadata", (), {"topics": {topic: None}})()

    monkeypatch.setattr(ka, "connect", lambda address, **kw: Answering())
    # no progress group: its ACL check would ask the fake admin to describe it
    run = invoke(
        "pipeline", "run", "-b", "h:1", "--topic", topic, "--warehouse", "/x", "--progress-group", ""
    )
    assert run.exit_code == 0, run.output
    assert settings[-1].bootstrap == "h:1"


def test_sync_that_does_not_catch_up_in_time_says_so(kafka_bootstrap: str, make_topic: TopicFactory) -> None:
    changes = make_topic(partitions=2, prefix="changes")
    generated = invoke(
        "catalog", "generate", "-b", kafka_bootstrap, "--topic", changes, "--entities", "50",
        "--events", "3000", "--no-progress",
    )  # fmt: skip
    assert generated.exit_code == 0, generated.output
    u = uuid.uuid4().hex[:10]
    result = invoke(
        "catalog", "sync", "-b", kafka_bootstrap, "--changes-topic", changes, "--entities-topic",
        f"entities-{u}", "--dead-letter-topic", f"dlq-{u}", "--group-id", f"sync-{u}", "--delay", "0",
        "--latency-ms", "20", "--until-caught-up", "--timeout", "0.5",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert (
        "not caught up within --timeout 0.5 s" in result.stderr and f"laneway lag sync-{u}" in result.stderr
    )


@pytest.mark.parametrize(
    "command",
    [
        ["catalog", "generate", "--no-progress"],
        ["catalog", "sync", "--until-caught-up"],
        ["pipeline", "run", "--warehouse", "/nonexistent/wh"],
    ],
)
def test_unreachable_broker_fails_fast_with_one_line(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from laneway.spark import pipeline

    def no_spark(settings: object) -> None:
        raise AssertionError("the pipeline started with no broker to read from")

    monkeypatch.setattr(pipeline, "run_pipeline", no_spark)
    t0 = time.monotonic()
    result = invoke(*command, "--bootstrap", "127.0.0.1:1")
    assert time.monotonic() - t0 < 15
    line = one_line_error(result)
    assert "127.0.0.1:1" in line and "no Kafka broker answered" in line


@pytest.mark.parametrize(
    "command",
    [
        ["catalog", "generate"],
        ["catalog", "sync"],
        ["catalog", "show"],
        ["catalog", "search"],
        ["catalog", "lineage"],
        ["pipeline", "run"],
    ],
)
def test_every_command_has_help_with_an_example(command: list[str]) -> None:
    result = invoke(*command, "--help", columns=200)  # rich cuts long words in narrow tables
    assert result.exit_code == 0, result.output
    assert "Example: laneway " + " ".join(command) in result.stdout
    if command[1] in ("generate", "sync", "run"):  # the ops commands' option, its help text intact
        assert re.search(r"--bootstrap\s+-b\s", result.stdout), result.stdout
        text = " ".join(result.stdout.replace("│", " ").split())
        assert "$LANEWAY_BOOTSTRAP" in text and "laneway broker" in text, text


def test_generate_stops_with_one_line_when_the_broker_goes_away() -> None:
    """A broker killed mid-run: generate stops sending once the broker has answered nothing for
    --stall-timeout, and says in one line, exit 1, what was acknowledged (it printed a traceback
    after librdkafka's 300 s, and a connection error a second)."""
    import threading

    from laneway.ops.broker import LocalBroker

    with LocalBroker.create() as broker:
        topic = f"catalog-changes-{uuid.uuid4().hex[:12]}"
        killed = threading.Event()

        def kill_when_records_landed() -> None:
            from confluent_kafka import Consumer, TopicPartition

            c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
            try:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    try:
                        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=2)
                    except Exception:  # the topic is not there yet
                        high = 0
                    if high >= 50:
                        break
                    time.sleep(0.1)
            finally:
                c.close()
            broker.kill()
            killed.set()

        killer = threading.Thread(target=kill_when_records_landed, daemon=True)
        killer.start()
        # 2,000 records at 200/s: ten seconds of producing, the broker killed after the first 50
        result = invoke(
            "catalog", "generate", "-b", broker.bootstrap, "--topic", topic, "--partitions", "1",
            "--entities", "20", "--events", "2000", "--rate", "200", "--stall-timeout", "3",
            "--no-progress",
        )  # fmt: skip
        killer.join(timeout=70)
    assert killed.is_set()
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    match = re.fullmatch(
        rf"error: producing to {topic} stopped, the broker answered nothing for 3 s: (\d+) of 2000 "
        r"records acknowledged, 0 failed, (\d+) sent without an answer \(they may have landed\), "
        r"(\d+) not sent",
        lines[0],
    )
    assert match, lines[0]
    acknowledged, unanswered, unsent = (int(g) for g in match.groups())
    assert acknowledged >= 50 and unanswered >= 1
    assert unsent > 0  # it stopped sending: the stream had records left
    assert acknowledged + unanswered + unsent == 2000
    assert "produced" not in result.stdout


def test_pipeline_run_wants_every_partition_in_json_starting_offsets(
    kafka_bootstrap: str, make_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Spark's Kafka source asserts that JSON starting offsets name every partition of the topic:
    a py4j stack trace, and empty tables and a checkpoint left behind. The topic's partitions are
    known once the broker answers, before Spark starts."""
    from laneway.spark import pipeline

    topic = make_topic(partitions=3, prefix="entities")
    ran: list[object] = []

    def fake_run(s: object, **_: object) -> pipeline.PipelineResult:  # no Spark job
        ran.append(s)
        return pipeline.PipelineResult((), 0, 0, None, None)

    monkeypatch.setattr(pipeline, "run_pipeline", fake_run)
    warehouse = tmp_path / "wh"
    base = [
        "pipeline",
        "run",
        "--bootstrap",
        kafka_bootstrap,
        "--topic",
        topic,
        "--warehouse",
        str(warehouse),
    ]
    base += ["--progress-group", ""]
    line = one_line_error(invoke(*base, "--starting-offsets", f'{{"{topic}": {{"0": 0, "5": 1}}}}'))
    assert line.startswith(f"error: --starting-offsets: name every partition of {topic!r} (3: 0-2)"), line
    assert line.endswith(f"it leaves out 1, 2; {topic!r} has no partition 5"), line
    assert ran == [] and not warehouse.exists()
    every = f'{{"{topic}": {{"0": 0, "1": -2, "2": -1}}}}'
    assert invoke(*base, "--starting-offsets", every).exit_code == 0 and len(ran) == 1
