"""``--client-config`` on every command that talks to Kafka, against the plaintext test broker:
a file of harmless settings (its ``bootstrap.servers`` the only way to the broker) works for
each; a file asking for SASL_SSL fails each within seconds with one line and exit code 2."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import orjson
import pytest
import typer
from confluent_kafka import Consumer, TopicPartition
from typer.testing import CliRunner, Result

from laneway.ops import catalog_cli, kafka_cli, run_cli, spark_cli
from tests.kafka_ready import commit_for

SECRET = "n0t-the-password-9"


def make_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False)
    for module in (run_cli, kafka_cli, catalog_cli, spark_cli):
        module.register(app)
    return app


def invoke(*args: str) -> Result:
    return CliRunner().invoke(make_app(), list(args), env={"COLUMNS": "200"})


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No $LANEWAY_BOOTSTRAP, no recorded broker, no $LANEWAY_CLIENT_CONFIG: only the file
    leads to the broker."""
    monkeypatch.delenv("LANEWAY_BOOTSTRAP", raising=False)
    monkeypatch.delenv("LANEWAY_CLIENT_CONFIG", raising=False)
    monkeypatch.setenv("LANEWAY_CACHE", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def world(kafka_bootstrap: str, make_topic: object, nowhere: Path) -> dict[str, str]:
    topic = make_topic(partitions=2, prefix="cc")  # type: ignore[operator]
    group = f"cc-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    commit_for(c, [TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    c.close()
    return {"topic": topic, "group": group}


COMMANDS = {
    "topics list": ["topics", "list"],
    "topics describe": ["topics", "describe", "{topic}"],
    "topics create": ["topics", "create", "{topic}-new"],
    "health": ["health"],
    "lag": ["lag", "{group}"],
    "replay": ["replay", "{group}", "--to-earliest", "--dry-run"],
    "dlq show": ["dlq", "show", "{topic}"],
    "dlq redrive": ["dlq", "redrive", "{topic}", "--dry-run"],
    "catalog generate": ["catalog", "generate", "--topic", "{topic}", "--entities", "5", "--events", "5"],
    "pipeline run": ["pipeline", "run", "--topic", "{topic}", "--warehouse", "{tmp}/wh"],
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_harmless_client_config_works_for_each_command(
    name: str, world: dict[str, str], kafka_bootstrap: str, nowhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from laneway.spark import pipeline

    seen: list[pipeline.PipelineSettings] = []
    done = pipeline.PipelineResult((), 0, 0, None, None)
    monkeypatch.setattr(pipeline, "run_pipeline", lambda s, **_: seen.append(s) or done)
    conf = nowhere / "client.properties"
    conf.write_text(f"# the test broker\nbootstrap.servers={kafka_bootstrap}\nclient.id=laneway-cc-test\n")
    args = [a.format(tmp=nowhere, **world) for a in COMMANDS[name]]
    result = invoke(*args, "--client-config", str(conf))
    assert result.exit_code == 0, result.output
    if name == "pipeline run":
        assert [(s.bootstrap, s.client_config) for s in seen] == [
            (kafka_bootstrap, {"client.id": "laneway-cc-test"})
        ]


def _app_module(tmp: Path, bootstrap: str, topic: str, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"cc_app_{uuid.uuid4().hex[:8]}"
    (tmp / f"{name}.py").write_text(
        "from laneway import App\n"
        f"app = App('cc', bootstrap_servers={bootstrap!r})\n"
        f"app.handler({topic!r}, on_failure='halt')(lambda e: None)\n"
    )
    monkeypatch.syspath_prepend(str(tmp))
    return f"{name}:app"


FAILING = {
    **COMMANDS,
    "catalog sync": ["catalog", "sync", "--until-caught-up", "--changes-topic", "{topic}"],
    "run": ["run", "{app}"],
}


@pytest.mark.parametrize("name", list(FAILING))
def test_sasl_ssl_at_a_plaintext_broker_fails_fast_with_one_line(
    name: str, world: dict[str, str], kafka_bootstrap: str, nowhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from laneway.spark import pipeline

    monkeypatch.setattr(pipeline, "run_pipeline", lambda s, **_: pytest.fail("Spark must not start"))
    conf = nowhere / "secured.properties"
    conf.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="app" password="{SECRET}";\n'
    )
    monkeypatch.setenv("LANEWAY_CLIENT_CONFIG", str(conf))  # the variable, not the option
    app = _app_module(nowhere, kafka_bootstrap, world["topic"], monkeypatch)
    args = [a.format(tmp=nowhere, app=app, **world) for a in FAILING[name]]
    t0 = time.monotonic()
    result = invoke(*args, *([] if name == "run" else ["--bootstrap", kafka_bootstrap]))
    took = time.monotonic() - t0
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: the listener at ") and "does not speak TLS" in lines[0]
    assert "security.protocol" in lines[0]
    assert SECRET not in result.output and "Traceback" not in result.output
    assert took < 15, took


def test_health_json_says_a_refused_client_in_its_document(
    kafka_bootstrap: str, nowhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker that answers but refuses the client (SASL asked of a plaintext listener): `health
    --json` still prints its document, the refusal as its problem, beside the one line and exit
    2 (a review: stdout was empty)."""
    conf = nowhere / "sasl.properties"
    conf.write_text(
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=u\nsasl.password={SECRET}\n"
    )
    monkeypatch.setenv("LANEWAY_CLIENT_CONFIG", str(conf))
    result = invoke("health", "--json", "--bootstrap", kafka_bootstrap)
    assert result.exit_code == 2, result.output
    doc = orjson.loads(result.stdout)
    assert doc["bootstrap"] == kafka_bootstrap and doc["ok"] is False
    [problem] = doc["problems"]
    assert result.stderr.strip() == f"error: {problem}"
    assert SECRET not in result.output
