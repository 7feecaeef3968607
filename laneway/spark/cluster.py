"""A Spark standalone cluster on 127.0.0.1 from the installed pyspark: one master, N workers.

Each daemon is its own JVM, started with pyspark's ``bin/spark-class`` as a user's cluster
runs them (``org.apache.spark.deploy.master.Master``, ``...worker.Worker``); an application's
executors are further JVMs that the workers start. :class:`StandaloneCluster` starts them,
waits until the master's web UI lists every worker ALIVE, and stops only the processes it
started (and their process groups, which hold the executors)::

    with StandaloneCluster(Path("/tmp/spark-cluster"), workers=2) as cluster:
        print(cluster.master_url)  # spark://127.0.0.1:PORT

``python -m laneway.spark.cluster --workers 2`` does the same from a shell and runs until
interrupted. docs/cluster.md has the recipe for a cluster of several machines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from laneway.errors import LanewayError

__all__ = ["ClusterError", "StandaloneCluster", "spark_home"]

logger = logging.getLogger(__name__)

_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"


class ClusterError(LanewayError, RuntimeError):
    """The standalone cluster could not be started; the message quotes the daemons' logs."""


def spark_home() -> Path:
    """The installed pyspark's folder: its ``bin/spark-class`` and ``jars/`` run the daemons."""
    import pyspark

    return Path(pyspark.__file__).parent


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StandaloneCluster:
    """A master and ``workers`` workers on loopback, each worker offering ``cores`` cores and
    ``memory`` to executors; logs and the workers' work folders go under ``root``.

    ``daemon_memory`` is each daemon's heap (the master's and the workers', not the
    executors'); ``java_options`` are added to the daemons' JVM options.
    """

    def __init__(
        self,
        root: Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        daemon_memory: str = "256m",
        java_options: str = "",
    ) -> None:
        if workers < 1 or cores < 1:
            raise ValueError(f"a cluster needs workers >= 1 and cores >= 1, got {workers} and {cores}")
        self.root = Path(root)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.daemon_memory = daemon_memory
        self.java_options = java_options
        self.port = _free_port()
        self.ui_port = _free_port()
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            SPARK_DAEMON_JAVA_OPTS=self.java_options,
        )
        if "JAVA_HOME" not in env and shutil.which("java") is None:
            raise ClusterError("java is not installed or not on PATH (Spark needs Java 17+)")
        return env

    def _launch(self, name: str, *args: str) -> None:
        spark_class = spark_home() / "bin" / "spark-class"
        log = (self.root / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            ["bash", str(spark_class), *args],
            env=self._env(),
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a group of its own: the worker's executors are in it too
        )
        log.close()
        self._procs.append((name, proc))

    def state(self) -> dict[str, Any] | None:
        """The master's status (its web UI's ``/json``), or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=2) as resp:
                data: dict[str, Any] = json.load(resp)
                return data
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def alive_workers(self) -> int:
        state = self.state() or {}
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _wait(self, what: str, ready: Any, deadline: float) -> None:
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [(name, p.returncode) for name, p in self._procs if p.poll() is not None]
            if dead:
                name, code = dead[0]
                raise ClusterError(f"the {name} exited with code {code} during start-up:\n{self.log_tail()}")
            time.sleep(0.3)
        raise ClusterError(f"{what} within the time allowed:\n{self.log_tail()}")

    def start(self, *, timeout: float = 120.0) -> StandaloneCluster:
        """Launch the master, then the workers; return once all workers are ALIVE."""
        self.root.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        try:
            self._launch(
                "master",
                *(_MASTER, "--host", "127.0.0.1", "--port", str(self.port)),
                *("--webui-port", str(self.ui_port)),
            )
            self._wait("the master did not answer", lambda: self.state() is not None, deadline)
            for i in range(self.workers):
                work = self.root / f"worker-{i}"
                work.mkdir(exist_ok=True)
                self._launch(
                    f"worker-{i}",
                    *(_WORKER, self.master_url, "--host", "127.0.0.1"),
                    *("--cores", str(self.cores), "--memory", self.memory),
                    *("--webui-port", str(_free_port()), "--work-dir", str(work)),
                )
            self._wait(
                f"{self.workers} workers did not register",
                lambda: self.alive_workers() >= self.workers,
                deadline,
            )
        except BaseException:
            self.stop()
            raise
        logger.info("spark standalone cluster at %s, %d workers", self.master_url, self.workers)
        return self

    def log_tail(self, lines: int = 20) -> str:
        text = ""
        for name, _ in self._procs:
            with contextlib.suppress(OSError):
                tail = (self.root / f"{name}.log").read_text(errors="replace").splitlines()[-lines:]
                text += f"--- {name}.log\n" + "\n".join(tail) + "\n"
        return text or "(no daemon log was written)"

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the workers, then the master (SIGTERM, SIGKILL after ``timeout``), and whatever
        is left in their process groups (executors)."""
        for _, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._procs.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start() if not self._procs else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m laneway.spark.cluster``: start a cluster, print its URL, run until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m laneway.spark.cluster", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores each worker offers")
    parser.add_argument("--memory", default="1g", help="memory each worker offers to executors")
    parser.add_argument(
        "--dir", type=Path, default=None, help="logs and work folders (default: a temp folder)"
    )
    args = parser.parse_args(argv)
    root = args.dir or Path(tempfile.mkdtemp(prefix="laneway-spark-cluster-"))
    cluster = StandaloneCluster(root, workers=args.workers, cores=args.cores, memory=args.memory)
    try:
        cluster.start()
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"master {cluster.master_url}  ui {cluster.ui_url}  logs {root}", flush=True)
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # delivered to sigwait, not to a handler
    try:
        signal.sigwait(stop)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
