"""Build the SparkSession the pipeline and the queries run on.

The session gets Spark's Kafka connector and Delta Lake from the jars that
``laneway.jars`` fetched from Maven Central (never Ivy at run time), Delta's SQL
extension and catalog, and defaults sized for a small machine. ``SessionSettings`` is a
frozen, picklable description of the session; nothing here opens a connection.

``master`` is any Spark master URL: ``local[*]`` (the default), ``local-cluster[2,1,1024]``
(real executor JVMs on one machine), ``spark://host:7077``, ``yarn``, ``k8s://...``.
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from laneway import jars
from laneway.errors import ConfigError
from laneway.spark.settings import master_problem
from laneway.spark.sizes import conf_size_problems, heap_size_problem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SessionSettings", "build_session", "extra_jars"]

logger = logging.getLogger(__name__)

#: the log4j2 configuration the driver starts with
LOG4J2 = Path(__file__).with_name("log4j2.properties")

# "kafka-clients-3.9.0.jar" -> "kafka-clients"; "scala-library-2.13.13.jar" -> "scala-library"
_ARTIFACT = re.compile(r"^(?P<artifact>.+?)-\d[^-]*(?:-[A-Za-z][\w.]*)?\.jar$")


def _artifact(jar_name: str) -> str:
    match = _ARTIFACT.match(jar_name)
    return match.group("artifact") if match else jar_name.removesuffix(".jar")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container, say)
        return str(os.getuid())


def _pyspark_jars_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def extra_jars(libs: Path | None = None, *, shipped: Path | None = None) -> list[Path]:
    """The jars of the Spark extras bundle that pyspark does not already ship, by artifact name.

    The bundle also holds transitive jars (hadoop-client, scala-library, ...) in versions
    that may differ from pyspark's own; passing those too would put two versions of one
    artifact on the classpath.
    """
    libs = libs if libs is not None else jars.ensure(jars.SPARK)
    shipped = shipped if shipped is not None else _pyspark_jars_dir()
    have = {_artifact(p.name) for p in shipped.glob("*.jar")}
    return sorted(p for p in libs.glob("*.jar") if _artifact(p.name) not in have)


#: SessionSettings' fields: the type each takes, and how to say it (ui="no" was taken as true)
_SESSION_KINDS: tuple[tuple[str, type, str], ...] = (
    ("master", str, "a str"),
    ("app_name", str, "a str"),
    ("driver_memory", str, "a str (Spark's size: '1g')"),
    ("shuffle_partitions", int, "a whole number"),
    ("ui", bool, "True or False"),
    ("conf", Mapping, "a dict of str"),
)


@dataclass(frozen=True, kw_only=True)
class SessionSettings:
    """How to build the session. Frozen and picklable.

    ``driver_memory`` is the driver JVM's heap, started as ``-Xmx<driver_memory>``: a whole
    number with a unit ``k``, ``m``, ``g`` or ``t`` (``'1g'``, ``'512m'``); the memory sizes in
    ``conf`` (``laneway.spark.sizes.CONF_SIZES``) are checked too, before any JVM starts.

    ``conf`` passes any other Spark setting through (``spark.executor.memory``, ...);
    it wins over the defaults here. Two of those defaults concern anyone who adds their
    own work to the session: Spark logs through ``laneway/spark/log4j2.properties``
    (``spark.driver.extraJavaOptions``), and ``spark.sql.warehouse.dir``, where managed
    tables would go, is a per-user folder in the temp folder (Laneway's tables are Delta
    paths); set them in ``conf`` to keep managed tables elsewhere.
    """

    master: str = "local[*]"
    app_name: str = "laneway"
    driver_memory: str = "1g"
    shuffle_partitions: int = 4
    ui: bool = False
    conf: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, kind, what in _SESSION_KINDS:  # .strip(), < 1 and dict() failed on them, bare
            value = getattr(self, name)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                got = f"a {type(value).__name__}" if kind is Mapping else repr(value)
                raise ConfigError(f"SessionSettings.{name}", f"must be {what}, got {got}")
        if not self.master.strip():
            raise ConfigError("SessionSettings.master", "must not be empty")
        if problem := master_problem(self.master):  # before a JVM: Spark's refusal is a py4j trace
            raise ConfigError("SessionSettings.master", problem)
        if self.shuffle_partitions < 1:
            raise ConfigError(
                "SessionSettings.shuffle_partitions", f"must be >= 1, got {self.shuffle_partitions}"
            )
        if problem := heap_size_problem(self.driver_memory):  # before a JVM: -Xmx<driver_memory>
            raise ConfigError("SessionSettings.driver_memory", problem)
        if sizes := conf_size_problems(self.conf):  # its spark.driver.memory wins over driver_memory
            raise ConfigError("SessionSettings.conf", "; ".join(f"{key}: {why}" for key, why in sizes))
        object.__setattr__(self, "conf", dict(self.conf))  # a private copy

    def spark_conf(self, jar_paths: list[Path]) -> dict[str, str]:
        """The full Spark configuration, defaults first, ``conf`` last."""
        out = {
            "spark.master": self.master,
            "spark.app.name": self.app_name,
            "spark.driver.memory": self.driver_memory,
            "spark.sql.shuffle.partitions": str(self.shuffle_partitions),
            "spark.default.parallelism": str(self.shuffle_partitions),
            "spark.ui.enabled": str(self.ui).lower(),
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.sql.session.timeZone": "UTC",
            # Delta rebuilds a table's state (its log: one row per file action) with 50 partitions
            # by default, once per table per commit; the pipeline's tables are compacted and
            # checkpointed, so their state is thousands of rows: one task's work, where each
            # further task adds a fixed cost to every MERGE
            "spark.databricks.delta.snapshotPartitions": "1",
            "spark.sql.streaming.stopGracefullyOnShutdown": "true",
            # Spark keeps the classes it generates for queries in an LRU cache of 100 entries; one
            # pipeline batch (Delta MERGEs and their log queries) generates about 110, so with the
            # default every batch compiled all of them again: ~100 Janino compilations and seconds
            # of CPU per batch, the main cost of a small batch
            "spark.sql.codegen.cache.maxEntries": "1000",
            # the JVM's collector when the session starts one (local mode: the tasks run in it too).
            # G1, the JDK's default, spent 4.3-5.1 CPU s per 300,000-record pipeline run (a third in
            # concurrent marking) against 1.8 s for the parallel collector, and the run took 5-8%
            # longer (one JVM each, alternated, on two cores); a batch pipeline has no use for G1's
            # short pauses. The log configuration is laneway/spark/log4j2.properties (Spark's
            # defaults without its start-up warnings). ``conf`` replaces the whole option string.
            "spark.driver.extraJavaOptions": (
                f"-XX:+UseParallelGC -Dlog4j2.configurationFile={LOG4J2.as_uri()}"
            ),
            # Laneway's tables are Delta paths, never managed tables: Spark's own warehouse, which it
            # creates as ./spark-warehouse wherever a command runs, goes to the temp folder
            "spark.sql.warehouse.dir": str(
                Path(tempfile.gettempdir()) / f"laneway-spark-warehouse-{_user()}"
            ),
        }
        if jar_paths:
            out["spark.jars"] = ",".join(str(p) for p in jar_paths)
        out.update(self.conf)
        return out


def build_session(settings: SessionSettings | None = None, *, libs: Path | None = None) -> SparkSession:
    """Create (or return the process's running) SparkSession with the Kafka and Delta jars.

    Spark allows one SparkContext per process: when one already runs, it is returned as
    it is and settings that need a new JVM (master, jars, driver memory) do not apply.
    """
    from pyspark.sql import SparkSession

    settings = settings or SessionSettings()
    jar_paths = extra_jars(libs)
    conf = settings.spark_conf(jar_paths)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    logger.info("starting Spark session on %s with %d extra jars", settings.master, len(jar_paths))
    return builder.getOrCreate()
