"""The dashboard, the alert rules and their runbook links, checked without Prometheus (issue 23);
and the engine feeding the event-time-to-done histogram on each of its paths.

tests/integration/test_prometheus.py runs them against a real Prometheus and a real app.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from laneway.engine.events import Event
from laneway.engine.handlers import HandlerSpec
from laneway.engine.policies import Retry
from laneway.engine.processor import Processor
from laneway.monitor.metrics import PrometheusMetrics
from laneway.monitor.status import StatusBoard
from tests.integration.test_prometheus import panel_queries, rule_expressions
from tests.unit.test_processor import FakeDeadLetters, wait_for

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "laneway.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
OPERATIONS = ROOT / "docs" / "operations.md"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        out.add(slug)
    return out


def _exported_names() -> set[str]:
    """Every metric family an app's registry exposes (HELP lines, samples or not)."""
    metrics = PrometheusMetrics()
    board = StatusBoard(
        name="app",
        group="g",
        metrics=metrics,
        processor=lambda: None,
        paused=dict,
        caps=(1, 1),
        stall=60.0,
    )
    board.health = lambda: None
    metrics.registry.register(board.collector())
    text = generate_latest(metrics.registry).decode()
    return set(re.findall(r"^# TYPE (\S+) ", text, flags=re.M))


def _family(name: str) -> str:
    return re.sub(r"_(bucket|count|sum|total|created)$", "", name)


def test_every_runbook_url_points_at_a_playbook_heading_of_operations_md() -> None:
    text = RULES.read_text()
    urls = re.findall(r"runbook_url:\s*\"?([^\"\s]+)\"?", text)
    assert len(urls) == len(rule_expressions(text))  # one each
    anchors = _anchors(OPERATIONS.read_text())
    for url in urls:
        path, _, anchor = url.partition("#")
        assert path == "docs/operations.md", url
        assert anchor in anchors, f"{url}: no heading #{anchor} in docs/operations.md"


def test_every_link_inside_operations_md_resolves() -> None:
    text = OPERATIONS.read_text()
    anchors = _anchors(text)
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert len(links) >= 10
    assert [a for a in links if a not in anchors] == []
    for path in re.findall(r"\]\(\.\./([^)#]+)\)", text):
        assert (ROOT / path).exists(), path


def test_the_rules_name_only_metrics_the_app_exports_and_each_has_for_and_severity() -> None:
    text = RULES.read_text()
    exported = {_family(n) for n in _exported_names()}
    rules = rule_expressions(text)
    assert {
        "LanewayConsumerLagGrowing",
        "LanewayPartitionStalled",
        "LanewayDeadLetters",
        "LanewayRebalanceStorm",
        "LanewayUnhealthy",
        "LanewayDown",
        "LanewayEventsAtCap",
    } <= set(rules)
    for name, expr in rules.items():
        for metric in re.findall(r"\blaneway_[a-z_]+", expr):
            assert _family(metric) in exported, f"{name}: {metric} is not exported"
    assert len(re.findall(r"^\s+for:\s*\d+[smh]\s*$", text, flags=re.M)) == len(rules)
    assert len(re.findall(r"^\s+severity:\s*(warning|critical)\s*$", text, flags=re.M)) == len(rules)


def test_every_panel_selects_its_instances_from_the_data_source_variable() -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert "laneway_info" in variables["group"]["definition"]
    assert "$group" in variables["instance"]["definition"]
    exported = {_family(n) for n in _exported_names()}
    queries = panel_queries(dashboard)
    assert len(queries) >= 20
    for title, expr in queries:
        metrics = re.findall(r"\blaneway_[a-z_]+", expr)
        assert metrics, title
        for metric in metrics:
            assert _family(metric) in exported, f"{title}: {metric} is not exported"
        # each selector of a laneway metric is limited to the chosen instances
        assert expr.count('instance=~"$instance"') == len(metrics), (title, expr)
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${DS_PROMETHEUS}", panel["title"]
            assert all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for t in panel["targets"])
    titles = " ".join(t for t, _ in queries).lower()
    for word in (
        "processed",
        "p99",
        "lag",
        "time lag",
        "oldest",
        "gap",
        "memory",
        "dead letters",
        "rebalances",
    ):
        assert word in titles, word
    assert any(p["title"] == "Hot keys" for p in dashboard["panels"])


def test_promtool_checks_the_rules() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(
            "promtool is not installed (`make prometheus`); tests/integration/test_prometheus.py needs it"
        )
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rule_expressions(RULES.read_text()))} rules found" in done.stdout


def test_the_engine_samples_event_time_to_done_on_each_path() -> None:
    """Direct runs, a failure inside a direct run, and worker chunks: each success counts once."""
    metrics = PrometheusMetrics()

    def cheap(ev: Event) -> None:
        if ev.key == b"bad":
            raise ValueError("bad")

    def slow(ev: Event) -> None:
        time.sleep(0.001)

    specs = {
        "cheap": HandlerSpec(topic="cheap", fn=cheap, retry=Retry(max_attempts=1)),
        "slow": HandlerSpec(topic="slow", fn=slow, timeout=5.0),  # a timeout: never run inline
    }
    proc = Processor(specs, concurrency=4, dead_letters=FakeDeadLetters(), metrics=metrics)
    proc.assign([("cheap", 0), ("slow", 0)])
    stamp = int(time.time() * 1000) - 5000
    try:
        cheap_evs = [
            Event(
                "cheap", 0, i, b"bad" if i == 20 else f"k{i % 7}".encode(), b"v", timestamp_ms=stamp, size=1
            )
            for i in range(200)
        ]
        slow_evs = [
            Event("slow", 0, i, f"k{i % 5}".encode(), b"v", timestamp_ms=stamp, size=1) for i in range(50)
        ]
        proc.submit(cheap_evs)
        proc.submit(slow_evs)
        wait_for(lambda: proc.events_in_memory == 0)
    finally:
        assert proc.drain(5)
        proc.close()
    ages = metrics.event_time_totals()
    assert metrics.processed_count("cheap") == 199
    assert metrics.processed_count("slow") == 50
    assert ages["cheap"][-1][1] == 199
    assert ages["slow"][-1][1] == 50
    # every sample is about 5 s old: nothing in the buckets under 2.5 s, all by 10 s
    for topic in ("cheap", "slow"):
        under = dict(ages[topic])
        assert under[2.5] == 0 and under[10.0] == ages[topic][-1][1], (topic, ages[topic])


#: promtool unit tests of the thresholds and ``for`` durations (input series one a minute)
PROMTOOL_TESTS = """
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'laneway_partition_stalled{job="laneway",instance="a:9100",topic="orders",partition="3"}'
        values: '0 0 1 1 1 1'
      - series: 'laneway_partition_stalled{job="laneway",instance="a:9100",topic="orders",partition="4"}'
        values: '0 0 0 0 0 0'
      - series: 'laneway_dead_letters_total{job="laneway",instance="a:9100",topic="orders",reason="handler"}'
        values: '0+120x20'
      - series: 'laneway_dead_letters_total{job="laneway",instance="a:9100",topic="quiet",reason="handler"}'
        values: '0+1x20'
      - series: 'laneway_rebalances_total{job="laneway",instance="a:9100",kind="assign"}'
        values: '0+1x30'
      - series: 'laneway_rebalances_total{job="laneway",instance="b:9100",kind="assign"}'
        values: '0+0.2x30'
      - series: 'laneway_events_in_memory{job="laneway",instance="a:9100"}'
        values: '9500x20'
      - series: 'laneway_max_events{job="laneway",instance="a:9100"}'
        values: '10000x20'
      - series: 'laneway_events_in_memory{job="laneway",instance="b:9100"}'
        values: '8000x20'
      - series: 'laneway_max_events{job="laneway",instance="b:9100"}'
        values: '10000x20'
      - series: 'laneway_consumer_lag{job="laneway",instance="a:9100",topic="orders",partition="0"}'
        values: '0+100x40'
      - series: 'laneway_consumer_lag{job="laneway",instance="a:9100",topic="steady",partition="0"}'
        values: '500x40'
      - series: 'up{job="laneway",instance="a:9100"}'
        values: '1 1 0 0 0 0'
      - series: 'laneway_healthy{job="laneway",instance="b:9100"}'
        values: '1 0 0 0 0'
    alert_rule_test:
      - eval_time: 2m
        alertname: LanewayPartitionStalled
        exp_alerts: []
      - eval_time: 3m
        alertname: LanewayPartitionStalled
        exp_alerts:
          - exp_labels: {severity: critical, job: laneway, instance: "a:9100", topic: orders, partition: "3"}
      - eval_time: 10m
        alertname: LanewayDeadLetters
        exp_alerts:
          - exp_labels: {severity: warning, job: laneway, topic: orders}
      - eval_time: 25m
        alertname: LanewayRebalanceStorm
        exp_alerts:
          - exp_labels: {severity: warning, job: laneway, instance: "a:9100"}
      - eval_time: 9m
        alertname: LanewayEventsAtCap
        exp_alerts: []
      - eval_time: 11m
        alertname: LanewayEventsAtCap
        exp_alerts:
          - exp_labels: {severity: warning, job: laneway, instance: "a:9100"}
      - eval_time: 35m
        alertname: LanewayConsumerLagGrowing
        exp_alerts:
          - exp_labels: {severity: warning, job: laneway, topic: orders}
      - eval_time: 3m
        alertname: LanewayDown
        exp_alerts: []
      - eval_time: 5m
        alertname: LanewayDown
        exp_alerts:
          - exp_labels: {severity: critical, job: laneway, instance: "a:9100"}
      - eval_time: 4m
        alertname: LanewayUnhealthy
        exp_alerts:
          - exp_labels: {severity: critical, job: laneway, instance: "b:9100"}
"""


def test_promtool_unit_tests_the_thresholds_and_for_durations(tmp_path: Path) -> None:
    """Synthetic series: each alert fires past its threshold after its ``for``, and not below it."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (`make prometheus`)")
    # the annotations are templates checked by `promtool check rules`; here only labels are compared
    bare = re.sub(
        r"^\s+(annotations|summary|description|runbook_url):.*\n", "", RULES.read_text(), flags=re.M
    )
    (tmp_path / "alerts.yml").write_text(bare)
    (tmp_path / "alerts_test.yml").write_text("rule_files: [alerts.yml]\n" + PROMTOOL_TESTS)
    done = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yml"], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
