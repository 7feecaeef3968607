"""A local Apache Kafka broker (KRaft, one combined broker+controller node) on 127.0.0.1.

The jars come from Maven Central through :mod:`laneway.jars`. :class:`LocalBroker`
formats a fresh log directory, writes ``server.properties``, starts the JVM and
returns once the broker answers metadata requests. It stops only the process it
started.

    with LocalBroker.create() as broker:
        print(broker.bootstrap)

``secure=True`` serves a SASL_SSL listener with SCRAM users, TLS from a throwaway CA and ACLs
instead of the PLAINTEXT one (:mod:`laneway.ops.secured`); ``broker.config_path("app")`` is a
client file for the ``app`` user, ``broker.settings("app")`` the same as librdkafka settings.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from laneway import jars
from laneway.errors import LanewayError

if TYPE_CHECKING:
    from laneway.ops.secured import BrokerSecurity

__all__ = [
    "BrokerError",
    "BrokerInfo",
    "LocalBroker",
    "data_dir_mismatch",
    "free_port",
    "kind_mismatch",
    "port_taken",
    "wait_for_metadata",
]

logger = logging.getLogger(__name__)

_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""

_PLAIN_LISTENERS = """\
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
"""

_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
log.dirs={log_dir}
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
log.retention.hours=336
log.segment.bytes=67108864
"""


class BrokerError(LanewayError, RuntimeError):
    """The local broker could not be fetched, started or stopped."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_taken(port: int) -> str:
    """Why ``port`` on 127.0.0.1 cannot be listened on (``""`` when it can). Bound with
    SO_REUSEADDR, as the broker binds: a port left in TIME_WAIT by a broker just stopped is free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return ""


def wait_for_metadata(
    bootstrap: str,
    timeout: float,
    alive: Callable[[], bool] = lambda: True,
    config: dict[str, Any] | None = None,
) -> bool:
    """True once a Kafka cluster at ``bootstrap`` answers a metadata request.

    Gives up early (False) when ``alive()`` turns false, e.g. the broker process exited.
    ``config``: further client settings (a secured broker's credentials).
    """
    from confluent_kafka.admin import AdminClient

    quiet = logging.getLogger("laneway.ops.broker.probe")
    quiet.setLevel(logging.CRITICAL)
    admin = AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.connection.setup.timeout.ms": 1000,
            "log_level": 0,
            **(config or {}),
        },
        logger=quiet,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        try:
            md = admin.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
        except Exception:  # KafkaException while the broker is not yet up
            time.sleep(0.2)
            continue
        if md.brokers:
            return True
    return False


@dataclass(frozen=True)
class BrokerInfo:
    """What ``laneway broker start`` records so ``stop`` can find its process."""

    pid: int
    bootstrap: str
    data_dir: str
    #: a secured broker's client files by user (admin, app, reader); empty for a plain one
    client_configs: dict[str, str] = field(default_factory=dict)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> BrokerInfo | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def alive(self) -> bool:
        """True while the recorded PID is a Kafka JVM over this data dir."""
        try:
            cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return False
        return "kafka.Kafka" in cmdline and self.data_dir in cmdline


class LocalBroker:
    """One Kafka broker process on loopback, owned by this object."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        heap: str = "512m",
        owns_data_dir: bool = False,
        secure: bool = False,
        properties: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        #: broker settings over the defaults (``server.properties`` lines, e.g. a lower
        #: ``transaction.max.timeout.ms``); a line break in one is refused at the start
        self.properties = dict(properties or {})
        self.port = port or free_port()
        self.controller_port = free_port()
        self.heap = heap
        self.proc: subprocess.Popen[bytes] | None = None
        self._owns_data_dir = owns_data_dir
        self.secure = secure
        #: the secured broker's CA, certificate and passwords (made at the first start)
        self.security: BrokerSecurity | None = None

    @classmethod
    def create(
        cls, *, port: int | None = None, secure: bool = False, properties: Mapping[str, str] | None = None
    ) -> LocalBroker:
        """A broker over a new temporary data directory, removed on stop."""
        data = Path(tempfile.mkdtemp(prefix="laneway-kafka-"))
        return cls(data, port=port, owns_data_dir=True, secure=secure, properties=properties)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _secured(self) -> BrokerSecurity:
        if self.security is None:
            raise BrokerError("the broker is not secured (LocalBroker(..., secure=True)) or not started")
        return self.security

    def config_path(self, user: str) -> Path:
        """A secured broker's client file for ``user`` (``admin``, ``app``, ``reader``)."""
        return self._secured().config_path(user)

    def settings(self, user: str) -> dict[str, str]:
        """A secured broker's librdkafka settings for ``user``, ``bootstrap.servers`` included."""
        return {"bootstrap.servers": self.bootstrap, **self._secured().settings(user)}

    def _probe_config(self) -> dict[str, Any]:
        return {} if self.security is None else self.security.settings("admin")

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    def _java(self) -> str:
        java_home = os.environ.get("JAVA_HOME")
        java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
        if not java:
            raise BrokerError("java is not installed or not on PATH (Kafka needs Java 17+)")
        return java

    def _command(self, libs: Path, main: str, *args: str) -> list[str]:
        return [
            self._java(),
            f"-Xmx{self.heap}",
            f"-Xms{min(256, int(self.heap.rstrip('m')))}m" if self.heap.endswith("m") else "-Xms256m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.data_dir}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    def start(self, *, timeout: float = 60.0, detach: bool = False) -> LocalBroker:
        """Format, launch and wait until the broker answers; raise :class:`BrokerError` otherwise.
        A port outside 1-65535 or a data directory that cannot be written is one line, before
        any Java starts."""
        if not 1 <= self.port <= 65535:
            raise BrokerError(f"port {self.port} is not a TCP port (1-65535)")
        taken = port_taken(self.port)
        if taken:  # else the readiness check may get its answer from whatever listens there
            raise BrokerError(f"port {self.port} on 127.0.0.1 is in use ({taken}): choose another --port")
        log_dir = self.data_dir / "logs"
        props = self.data_dir / "server.properties"
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            props.touch(mode=0o600)
            props.chmod(0o600)  # before writing: a secured broker's holds the admin's password
        except OSError as exc:
            raise BrokerError(
                f"cannot create and write the data directory {self.data_dir}: {exc.strerror or exc}"
            ) from None
        libs = jars.ensure(jars.KAFKA)
        props.write_text(self._properties(log_dir))
        (self.data_dir / "log4j2.properties").write_text(_LOG4J.format(log=self.log_file))
        scram = self.security.scram_arguments() if self.security is not None else []
        if not (log_dir / "meta.properties").exists():
            cluster_id = "-"
            while cluster_id.startswith("-"):  # kafka-storage would read a leading "-" as an option
                cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            fmt = subprocess.run(
                self._command(
                    libs, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props), *scram
                ),
                capture_output=True,
                text=True,
                check=False,
            )
            if fmt.returncode != 0:
                raise BrokerError(f"formatting {log_dir} failed:\n{fmt.stdout}{fmt.stderr}")
        out = (self.data_dir / "stdout.log").open("ab")
        self.proc = subprocess.Popen(
            self._command(libs, "kafka.Kafka", str(props)),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=detach,
        )
        out.close()
        proc = self.proc
        alive = lambda: proc.poll() is None  # noqa: E731
        if wait_for_metadata(self.bootstrap, timeout, alive=alive, config=self._probe_config()):
            if self.security is not None:
                self._secure_clients()
            logger.info("kafka broker up at %s (pid %d)", self.bootstrap, proc.pid)
            return self
        if proc.poll() is not None:
            raise BrokerError(
                f"the broker exited with code {proc.returncode} during start-up:\n{self.log_tail()}"
            )
        self.stop()
        raise BrokerError(f"the broker did not answer within {timeout:.0f}s:\n{self.log_tail()}")

    def _properties(self, log_dir: Path) -> str:
        ports = {"port": self.port, "controller_port": self.controller_port}
        if self.secure and self.security is None:
            try:
                from laneway.ops.secured import BrokerSecurity
            except ImportError as exc:  # cryptography, for the CA
                raise BrokerError(
                    "a secured broker needs the 'cryptography' package "
                    f"(pip install 'laneway[broker]'): {exc}"
                ) from None
            self.security = BrokerSecurity.create(self.data_dir / "security")
        listeners = (
            self.security.server_properties(**ports)
            if self.security is not None
            else _PLAIN_LISTENERS.format(**ports)
        )
        for key, value in self.properties.items():
            if any(c in f"{key}{value}" for c in "\r\n"):
                raise BrokerError(f"broker setting {key!r}: a line break cannot be in a setting")
        extra = "".join(f"{key}={value}\n" for key, value in self.properties.items())
        text = _PROPERTIES.format(log_dir=log_dir, **ports) + listeners
        return text + ("" if text.endswith("\n") else "\n") + extra

    def _secure_clients(self) -> None:
        """ACLs for the app and reader users, then their client files (as admin)."""
        security = self._secured()
        try:
            security.create_acls(self.bootstrap)
        except Exception as exc:  # KafkaException: the admin could not create them
            self.stop()
            raise BrokerError(f"creating the ACLs failed: {exc}\n{self.log_tail()}") from None
        security.write_client_configs(self.bootstrap)

    def log_tail(self, lines: int = 30) -> str:
        text = ""
        for f in (self.log_file, self.data_dir / "stdout.log"):
            with contextlib.suppress(OSError):
                text += "\n".join(f.read_text(errors="replace").splitlines()[-lines:]) + "\n"
        return text or "(no broker log was written)"

    def info(self) -> BrokerInfo:
        if self.proc is None:
            raise BrokerError("the broker was not started")
        configs = {} if self.security is None else {u: str(self.config_path(u)) for u in _users()}
        return BrokerInfo(
            pid=self.proc.pid, bootstrap=self.bootstrap, data_dir=str(self.data_dir), client_configs=configs
        )

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the process this object started (SIGTERM, then SIGKILL after ``timeout``)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the broker (for fault tests); its data directory is kept for a restart."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> LocalBroker:
        return self.start() if self.proc is None else self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _users() -> tuple[str, ...]:
    from laneway.ops.secured import USERS

    return USERS


def kind_mismatch(info: BrokerInfo, *, secure: bool) -> str | None:
    """Why a ``laneway broker start`` (``--secure`` or not) cannot take the running broker
    ``info`` as its own, or None when it is of the kind asked for."""
    running_secure = bool(info.client_configs)
    if running_secure == secure:
        return None
    if secure:
        return (
            f"a plain (PLAINTEXT) broker runs at {info.bootstrap} (pid {info.pid}), not a secured one; "
            "stop it first (laneway broker stop) to start a secured one"
        )
    return (
        f"the broker that runs at {info.bootstrap} (pid {info.pid}) is the secured one (SASL_SSL: "
        "clients need --client-config, see laneway broker status); stop it first (laneway broker "
        "stop) to start a plain one"
    )


def port_mismatch(info: BrokerInfo, port: int) -> str | None:
    """Why a ``laneway broker start --port PORT`` cannot take the running broker ``info`` as its
    own (it listens on another port), or None: ``port`` 0 (any) or its own."""
    if not port or info.bootstrap.rsplit(":", 1)[-1] == str(port):
        return None
    return (
        f"a broker already runs at {info.bootstrap} (pid {info.pid}), not on port {port}; "
        "stop it first (laneway broker stop), or give the second one a cache of its own "
        "(LANEWAY_CACHE=<folder> laneway broker start ...)"
    )


def data_dir_mismatch(info: BrokerInfo, data_dir: Path | None) -> str | None:
    """Why a ``laneway broker start --data-dir DIR`` cannot take the running broker ``info`` as
    its own (it keeps its logs elsewhere), or None: no ``--data-dir``, or its own."""
    if data_dir is None or Path(info.data_dir).resolve() == data_dir.resolve():
        return None
    return (
        f"a broker already runs at {info.bootstrap} (pid {info.pid}) with its data in {info.data_dir}, "
        f"not {data_dir}; stop it first (laneway broker stop), or give the second one a cache of "
        "its own (LANEWAY_CACHE=<folder> laneway broker start ...)"
    )


def stop_recorded(info: BrokerInfo, timeout: float = 20.0) -> bool:
    """Stop a detached broker recorded by ``laneway broker start``; False when it was not running."""
    if not info.alive():
        return False
    os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not info.alive():
            return True
        time.sleep(0.2)
    os.kill(info.pid, signal.SIGKILL)
    return True
