"""Running one contender as its own process, measuring it, and judging its correctness."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from bench.contenders import ORDERED, QUIX
from bench.kafka_io import Kafka
from bench.workload import RunSpec

__all__ = ["QUIX_VENV", "Runner", "ensure_quix_venv"]

ROOT = Path(__file__).resolve().parent.parent
QUIX_VENV = ROOT / "bench" / ".venv-quix"
QUIX_REQUIREMENTS = ["quixstreams==3.28.1", "psutil"]


def ensure_quix_venv(log: Any = print) -> Path:
    """bench/.venv-quix with quixstreams (it pins confluent-kafka<2.13, so not in .venv)."""
    py = QUIX_VENV / "bin" / "python"
    if py.exists() and subprocess.run([py, "-c", "import quixstreams"], capture_output=True).returncode == 0:
        return py
    log(f"creating {QUIX_VENV} for quixstreams")
    subprocess.run(["python3.11", "-m", "venv", str(QUIX_VENV)], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", *QUIX_REQUIREMENTS], check=True)
    return py


class Runner:
    """Runs contenders in fresh processes, one at a time, and records their results."""

    def __init__(self, kafka: Kafka, out_dir: Path, log: Any = print) -> None:
        self.kafka = kafka
        self.out_dir = out_dir
        self.log = log
        self._quix_python: Path | None = None

    def python_for(self, contender: str) -> str:
        if contender == QUIX:
            if self._quix_python is None:
                self._quix_python = ensure_quix_venv(self.log)
            return str(self._quix_python)
        return sys.executable

    def broker_process(self) -> psutil.Process | None:
        """The local process listening on the bootstrap port, if any (to charge its CPU to runs)."""
        if not hasattr(self, "_broker"):
            self._broker: psutil.Process | None = None
            port = int(self.kafka.bootstrap.rsplit(":", 1)[1])
            try:
                for conn in psutil.net_connections(kind="tcp"):
                    if (
                        conn.status == psutil.CONN_LISTEN
                        and conn.laddr
                        and conn.laddr.port == port
                        and conn.pid
                    ):
                        self._broker = psutil.Process(conn.pid)
                        break
            except (psutil.Error, OSError):
                pass
        return self._broker

    def _broker_cpu(self) -> float | None:
        b = self.broker_process()
        if b is None:
            return None
        try:
            t = b.cpu_times()
            return float(t.user + t.system)
        except psutil.Error:
            return None

    def start(self, spec: RunSpec) -> _Child:
        spec_path = self.out_dir / "runs" / f"{spec.group}.spec.json"
        spec_path.parent.mkdir(parents=True, exist_ok=True)
        spec_path.write_text(json.dumps(dataclasses.asdict(spec)))
        result_path = spec_path.with_suffix("").with_suffix(".result.json")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [self.python_for(spec.contender), "-m", "bench.child", str(spec_path), str(result_path)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(spec_path.with_suffix("").with_suffix(".stderr"), "wb"),  # noqa: SIM115
        )
        child = _Child(proc, spec, result_path)
        child.broker_cpu0 = self._broker_cpu()
        return child

    def run(
        self, spec: RunSpec, *, full_topic: bool = True, extra: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Run one contender to completion; ``full_topic``: it must have committed the whole topic."""
        return self.finish(self.start(spec), full_topic=full_topic, extra=extra)

    def finish(
        self,
        child: _Child,
        *,
        full_topic: bool = True,
        may_fall_behind: bool = False,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Wait for a started run and judge it. ``may_fall_behind``: a fixed-rate run that did
        not handle everything before its timeout is slow (``kept_up`` false), not wrong."""
        res = child.wait(self.kafka)
        b1 = self._broker_cpu()
        if b1 is not None and child.broker_cpu0 is not None:
            res["broker_cpu_s"] = b1 - child.broker_cpu0
        spec = child.spec
        res.update(extra or {})
        notes: list[str] = []
        if res.get("error"):
            notes.append("crashed: " + res["error"].strip().splitlines()[-1])
        res["kept_up"] = bool(res.get("reached_limit"))
        if not res["kept_up"] and not may_fall_behind:
            notes.append(f"handled {res.get('count', 0)} of {spec.limit}")
        if res.get("duplicates"):
            notes.append(f"{res['duplicates']} duplicates")
        if res.get("order_violations") and spec.contender in ORDERED:
            notes.append(f"{res['order_violations']} per-key order violations")
        if full_topic and res.get("reached_limit"):
            end = self.kafka.end_offsets(spec.topic, spec.partitions)
            committed = res["committed"] = self.kafka.committed(spec.group, spec.topic, spec.partitions)
            if committed != end:
                notes.append(f"committed {sum(committed)} of {sum(end)} offsets")
        res["correct"] = not notes
        res["notes"] = notes
        res["spec"] = dataclasses.asdict(spec) | {"end_offsets": None}
        verdict = "ok" if res["correct"] else "FAIL " + "; ".join(notes)
        if not res["kept_up"] and res["correct"]:
            verdict += f" (fell behind: handled {res.get('count', 0)} of {spec.limit})"
        self.log(
            f"  {spec.contender:<18} c={spec.concurrency:<5} n={spec.limit:<8} "
            f"{res.get('rate', 0):>10,.0f} rec/s  cpu {res.get('cpu_window_s', 0):6.2f}s  "
            f"wall {res.get('wall_s', 0):6.1f}s  rss {res.get('rss_peak_mb', 0):6.0f} MB  {verdict}"
        )
        return res


class _Child:
    """A running contender process, its RSS sampled every 0.1 s."""

    def __init__(self, proc: subprocess.Popen[bytes], spec: RunSpec, result_path: Path) -> None:
        self.proc = proc
        self.spec = spec
        self.result_path = result_path
        self.rss: list[tuple[float, float]] = []
        self.broker_cpu0: float | None = None
        self._t0 = time.monotonic()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        try:
            ps = psutil.Process(self.proc.pid)
            while ps.status() != psutil.STATUS_ZOMBIE:  # never reap here: wait() needs its rusage
                self.rss.append((time.monotonic() - self._t0, ps.memory_info().rss / 2**20))
                time.sleep(0.1)
        except psutil.Error:
            pass

    def wait(self, kafka: Kafka) -> dict[str, Any]:
        try:
            _, status, ru = os.wait4(self.proc.pid, 0)
        except ChildProcessError:
            status, ru = self.proc.wait(), None
        self.proc.returncode = os.waitstatus_to_exitcode(status) if ru is not None else status
        self._sampler.join(2)
        wall = time.monotonic() - self._t0
        res: dict[str, Any]
        try:
            res = json.loads(self.result_path.read_text())
        except (OSError, ValueError):
            stderr = self.result_path.with_suffix("").with_suffix(".stderr")
            tail = stderr.read_text(errors="replace")[-2000:] if stderr.exists() else ""
            res = {
                "contender": self.spec.contender,
                "error": f"no result (exit {self.proc.returncode})\n{tail}",
            }
        if ru is not None:
            res["rusage_cpu_s"] = ru.ru_utime + ru.ru_stime
            res["rusage_maxrss_mb"] = ru.ru_maxrss / 1024
        res["rss_peak_mb"] = max((r for _, r in self.rss), default=res.get("rusage_maxrss_mb", 0.0))
        step = max(1, len(self.rss) // 300)
        res["rss_timeline"] = self.rss[::step]
        res["exit_code"] = self.proc.returncode
        res["process_wall_s"] = wall
        return res


def group_name(contender: str, scenario: str) -> str:
    return f"bench-{scenario}-{contender}-{uuid.uuid4().hex[:6]}"
