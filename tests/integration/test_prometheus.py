"""The dashboard and the alert rules against a real Prometheus (issue 23).

A real Prometheus (Debian's package: ``make prometheus`` installs it) scrapes a real app on the
real broker every second. The app processes records with a retry, a dead letter, a hot key and
a stuck handler. Then every panel query of ``deploy/grafana/laneway.json`` and every alert
expression of ``deploy/prometheus/alerts.yml`` returns series through the HTTP API, the counts
Prometheus scraped match what was produced, and the stalled-partition alert fires for the
stuck partition (the rules' ``for`` shortened to 1 s in a copy; the thresholds kept).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from laneway import App, Event, MetricsServer, Retry, Timeouts
from tests.conftest import TopicFactory

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "laneway.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"

STUCK_AT = 5
N0, N1 = 600, 100
#: a top-level comparison of an alert expression against its threshold, at the end
COMPARISON = re.compile(r"\s(==|!=|>=|<=|>|<)\s+(-?[0-9.]+)\s*$")


def _binaries() -> tuple[str, str]:
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus and promtool:
        return prometheus, promtool
    if os.geteuid() != 0:
        pytest.skip("prometheus is not installed and we are not root: run `make prometheus` as root")
    pytest.fail("prometheus/promtool not found: run `make prometheus` (`make test` and CI install it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _wait(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return cond()


def rule_expressions(text: str) -> dict[str, str]:
    """Alert name -> expression, from the rules file (one-line expressions)."""
    names = re.findall(r"^\s+- alert:\s*(\S+)\s*$", text, flags=re.M)
    exprs = re.findall(r"^\s+expr:\s*(.+?)\s*$", text, flags=re.M)
    assert len(names) == len(exprs), (names, exprs)
    return dict(zip(names, exprs, strict=True))


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expression) of every target of every panel, rows' panels included."""
    out = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                out.append((inner["title"], target["expr"]))
    return out


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Start a Prometheus scraping a target given later; yields ``start(target) -> base URL``."""
    prometheus, promtool = _binaries()
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    procs: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> str:
        text = RULES.read_text()
        fast, n = re.subn(r"^(\s+for:\s*)\S+\s*$", r"\g<1>1s", text, flags=re.M)
        assert n == len(rule_expressions(text))  # every rule has a `for`, shortened here only
        (tmp_path / "alerts.yml").write_text(fast)
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "rule_files: [alerts.yml]\n"
            "scrape_configs:\n  - job_name: laneway\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        port = _free_port()
        log = (tmp_path / "prometheus.log").open("wb")
        procs.append(
            subprocess.Popen(
                [
                    prometheus,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=tmp_path,
            )
        )
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as r:
                    return int(r.status) == 200
            except (urllib.error.URLError, OSError):
                return False

        assert _wait(ready, 20), (tmp_path / "prometheus.log").read_text()[-3000:]
        return base

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    for i in range(N0):
        if i == STUCK_AT:
            key = b"stuck"
        elif i == 10:
            key = b"poison"
        elif i == 20:
            key = b"retry"
        else:
            key = b"hot" if i % 5 < 3 else f"k{i % 40}".encode()
        producer.produce(topic, key=key, value=b"v", partition=0)
    for i in range(N1):
        producer.produce(topic, key=f"k{i % 10}".encode(), value=b"v", partition=1)
    assert producer.flush(30) == 0


def test_every_panel_and_alert_has_series_and_the_stall_alert_fires(
    kafka_bootstrap: str,
    make_topic: TopicFactory,
    group_id: str,
    prometheus_server: Callable[[str], str],
) -> None:
    topic = make_topic(partitions=2)
    dlq = make_topic(partitions=1, prefix="dlq")
    _produce(kafka_bootstrap, topic)
    gate = threading.Event()
    lock = threading.Lock()
    done = [0]
    attempts: dict[bytes, int] = {}

    def handle(ev: Event) -> None:
        key = ev.key or b""
        with lock:
            attempts[key] = attempts.get(key, 0) + 1
            tries = attempts[key]
        if key == b"stuck":
            gate.wait(60)
        elif key == b"poison" or (key == b"retry" and tries == 1):
            raise ValueError(key.decode())
        # past the chunk budget: one lane per chunk, so no lane waits for the stuck call's chunk
        # (the successes of a chunk are finished when the chunk's last call returns)
        time.sleep(0.002)
        with lock:
            done[0] += 1

    app = App(
        "prom",
        bootstrap_servers=kafka_bootstrap,
        group_id=group_id,
        metrics_server=MetricsServer(port=0),
        timeouts=Timeouts(stall=1.5),
    )
    retry = Retry(max_attempts=2, initial_backoff=0.05, jitter=0.0)
    app.handler(topic, dead_letter_topic=dlq, timeout=1.0, retry=retry)(handle)
    try:
        with app:
            target = f"127.0.0.1:{app.metrics_port}"
            base = prometheus_server(target)
            # everything but the stuck record and the poison one succeeds
            assert _wait(lambda: done[0] == N0 + N1 - 2), done

            def query(expr: str) -> list[dict[str, Any]]:
                url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
                body = _get(url)
                assert body["status"] == "success", (expr, body)
                result: list[dict[str, Any]] = body["data"]["result"]
                return result

            def value(expr: str) -> float | None:
                result = query(expr)
                return float(result[0]["value"][1]) if result else None

            # the counts Prometheus scraped are the app's
            assert _wait(lambda: value("sum(laneway_records_processed_total)") == N0 + N1 - 2)
            assert _wait(lambda: value("sum(laneway_dead_letters_total)") == 1)
            assert value("sum(laneway_retries_total)") == 2  # the poison record's and the retried one's
            assert value("sum(laneway_records_consumed_total)") == N0 + N1
            assert value(f'laneway_info{{group="{group_id}"}}') == 1

            # the dashboard's variables: its group and instance values
            def label_values(label: str, match: str) -> list[str]:
                url = f"{base}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": match})
                values: list[str] = _get(url)["data"]
                return values

            assert _wait(lambda: group_id in label_values("group", "laneway_info"))
            assert target in label_values("instance", f'laneway_info{{group="{group_id}"}}')

            dashboard = json.loads(DASHBOARD.read_text())
            queries = panel_queries(dashboard)
            assert len(queries) >= 20
            pending = {}
            for title, expr in queries:
                q = (
                    expr.replace("$instance", target)
                    .replace("$group", group_id)
                    .replace("$__rate_interval", "30s")
                )
                assert "$" not in q, (title, q)
                pending[f"panel {title!r}: {q}"] = q
            rules = rule_expressions(RULES.read_text())
            assert len(rules) >= 6
            for name, expr in rules.items():
                # the signal behind the threshold: `x > 5` as `x > bool 5` returns x's series
                signal, n = COMPARISON.subn(r" \1 bool \2", expr)
                assert n == 1, f"{name}: not one comparison against a threshold: {expr}"
                pending[f"alert {name}: {signal}"] = signal

            def all_have_series() -> bool:
                for what, q in list(pending.items()):
                    if query(q):
                        del pending[what]
                return not pending

            assert _wait(all_have_series, 30), sorted(pending)

            # the stuck handler's partition: the alert fires, for it alone
            def stall_alerts() -> list[dict[str, Any]]:
                alerts: list[dict[str, Any]] = _get(f"{base}/api/v1/alerts")["data"]["alerts"]
                return [a for a in alerts if a["labels"]["alertname"] == "LanewayPartitionStalled"]

            assert _wait(lambda: any(a["state"] == "firing" for a in stall_alerts())), stall_alerts()
            (alert,) = stall_alerts()
            assert (alert["labels"]["topic"], alert["labels"]["partition"]) == (topic, "0")
            assert alert["annotations"]["runbook_url"].endswith("#a-stuck-record")
            gate.set()
            assert _wait(lambda: done[0] == N0 + N1 - 1)
    finally:
        gate.set()
