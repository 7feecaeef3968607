"""The pipeline's settings (``PipelineSettings``), its triggers and its Kafka source defaults.

Batch size: a batch takes at most ``max_offsets_per_trigger`` records (Spark's
``maxOffsetsPerTrigger``; ``DEFAULT_MAX_OFFSETS_PER_TRIGGER``, 1,000,000), with either trigger:
Spark's Kafka source honours the cap under ``Trigger.AvailableNow`` too (SPARK-36649), so a
backlog lands in batches of at most that many. 0 or None lifts the cap: the whole backlog is one
batch.

Triggers: ``available-now`` backfills and stops. For a continuous run use a processing-time
trigger of ``STREAMING_TRIGGER`` (10 s) or more: a record waits up to one interval for its
batch to start and then for the batch's MERGEs (a batch of a few hundred records took 3-4 s
on two quiet cores, ~9 s on the shared benchmark box: mostly a fixed cost per batch), so
freshness p99 is about interval + batch time, within two intervals as long as a batch
takes less than one. Shorter intervals buy little: the MERGEs' fixed cost per batch
stays, each batch adds Delta files and log entries, and below the batch time the query
simply runs back to back, later than asked.

On a cluster (any master but ``local...``) the driver and every executor open the warehouse and
the checkpoint, each on its own machine: both must be absolute paths on a file system they all
see (``file:///shared/catalog`` on a shared mount, ``hdfs://...``, ``s3a://...``).
``shared_path_problem`` refuses a relative one, which names a folder under the driver's current
folder only (docs/cluster.md). With a local master a relative path is made absolute against
the current folder: Delta takes absolute table paths only.

On the local file system (a path without a scheme, or ``file:``), the streaming checkpoint
(a local checkpoint path) and Delta's checksum files (local warehouse and checkpoint paths)
are written with Spark's ``FileSystemBasedCheckpointFileManager``: the default one renames through Hadoop's
FileContext, whose local implementation forks a ``readlink`` process per file checked, twice
per rename, each fork costing milliseconds of a large JVM (about 400 forks per 300,000-record
run of four batches). Set on the query's own session; the caller's is left as it was
(``laneway.spark.pipeline`` for the query, ``laneway.spark.batch`` for each batch).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from laneway.errors import ConfigError
from laneway.kafka.java_config import spark_options
from laneway.spark.sizes import conf_size_problems

__all__ = [
    "AVAILABLE_NOW",
    "DEFAULT_MAX_OFFSETS_PER_TRIGGER",
    "MASTER_FORMS",
    "SOURCE_DEFAULTS",
    "STREAMING_TRIGGER",
    "PipelineSettings",
    "PipelineSettingsError",
    "local_master",
    "master_problem",
    "offsets_partitions",
    "shared_path_problem",
    "starting_offsets_problem",
]

AVAILABLE_NOW = "available-now"
#: the recommended processing-time trigger for a continuous run (module docstring: Triggers)
STREAMING_TRIGGER = "10 seconds"

#: The records a batch takes at most unless told otherwise (``maxOffsetsPerTrigger``; 0: no cap).
#: A batch is persisted whole, and with a local master in the driver's JVM, whose heap is Spark's
#: default 1 GB unless ``spark.driver.memory`` says more. Measured on the benchmark's records
#: (bench/JOURNAL.md, "the Spark pipeline at catalog scale"): 5,000,000 records in one batch ran
#: that heap out (``OutOfMemoryError: Java heap space``); 1,000,000 in one batch fit, and so did
#: 5,000,000 in 1,000,000-record batches, against a 3,000,000-row ``entities``. Large batches are
#: also the fast ones, since each batch's MERGE copies ``entities`` once: 1,000,000 records over
#: 632,000 entities landed at 0.54 of a plain append in one batch and 0.42 in 250,000-record
#: batches. So the cap is the largest batch measured to fit the default heap. Spark splits it
#: over the partitions in proportion to their backlog and rounds each share down, so a backlog
#: at or just over a multiple of the cap can end in a tail batch of a few records.
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 1_000_000

_INTERVAL = re.compile(
    r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?)\s*$"
)


#: Spark's Kafka source options the pipeline sets unless ``source_options`` does.
#: ``kafka.fetch.max.wait.ms``: an executor's Kafka consumer sends its next fetch before it
#: returns the records it has; at the end of the log the broker holds that fetch for up to
#: this long (Kafka's default: 500 ms) waiting for new records, and the task waits with it.
#: Every batch of a live stream and the last one of a backlog end there. Reading the last
#: 100,000 of 300,000 records over 8 partitions (``local[2]``) took 2.5-2.9 s, against 0.5 s
#: for as many records short of the end, or to the end with a 10 ms wait (BENCHMARKS.md,
#: "Spark: session 8"). A task never reads past its batch's end offsets, so a short wait adds
#: no fetches while the topic is idle.
SOURCE_DEFAULTS: Mapping[str, str] = {"kafka.fetch.max.wait.ms": "10"}

# On the local file system, Spark's default checkpoint file manager (Hadoop FileContext) forks
# a shell process (readlink) twice per rename; the streaming checkpoint renames two files per
# batch and Delta one checksum file per commit. FileSystem renames do not fork (module docstring).
_CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
_LOCAL_CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def _local(path: str) -> bool:
    """Whether ``path`` is on the local file system (no scheme, or ``file:``)."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", path) is None or path.startswith("file:")


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


#: the master URLs Spark 4.2 takes (``SparkContext.createTaskScheduler``): ``local``,
#: ``local[N]``/``local[*]``, ``local[N,F]`` (F: task failures allowed), ``local-cluster[N,C,M]``,
#: ``spark://HOST:PORT`` (a comma-separated list of masters), and the cluster managers pyspark
#: ships: ``yarn`` and ``k8s://...``. Spark 4 has no Mesos.
_MASTERS = (
    re.compile(r"local"),
    re.compile(r"local\[(?:[1-9][0-9]*|\*)\]"),
    re.compile(r"local\[(?:[1-9][0-9]*|\*)\s*,\s*[0-9]+\]"),
    re.compile(r"local-cluster\[\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*\]"),
    re.compile(r"spark://{hp}(?:,{hp})*".format(hp=r"(?:\[[0-9A-Fa-f:.]+\]|[^\s,/:\[\]]+):[0-9]+")),
    re.compile(r"yarn"),
    re.compile(r"k8s://\S+"),
)
MASTER_FORMS = (
    "local, local[N], local[*], local[N,F], local-cluster[N,CORES,MB], spark://HOST:PORT, yarn or k8s://URL"
)


def master_problem(master: str) -> str | None:
    """Why Spark would refuse ``master`` as a master URL, or None when it takes it: found
    before a JVM starts (Spark's refusal is a py4j stack trace)."""
    if any(form.fullmatch(master) for form in _MASTERS):
        ports = (
            [int(p) for p in re.findall(r":([0-9]+)(?=,|$)", master)] if master.startswith("spark://") else []
        )
        if bad := [p for p in ports if not 0 < p < 65536]:
            return f"{master!r}: port {bad[0]} is not a port (1-65535)"
        return None
    if master.startswith("mesos://"):
        return f"{master!r}: Spark 4 has no Mesos support; use {MASTER_FORMS}"
    return f"{master!r} is not a Spark master URL: use {MASTER_FORMS}"


def starting_offsets_problem(offsets: str, topic: str) -> str | None:
    """Why Spark's Kafka source would refuse ``offsets`` as ``startingOffsets`` for ``topic``,
    or None: ``earliest``, ``latest``, or a JSON object of the topic's partitions and offsets,
    ``{"orders": {"0": 42, "1": -2}}`` (-2: earliest, -1: latest). Spark wants every partition
    of the topic named; the partition count is the broker's to say (see :func:`offsets_partitions`).
    ``earliest`` and ``latest`` are taken in any case, as Spark takes them."""
    if offsets.strip().lower() in ("earliest", "latest"):
        return None
    example = f'earliest, latest or JSON like {{"{topic}": {{"0": 42, "1": -2}}}} (-2: earliest, -1: latest)'
    try:
        parsed = json.loads(offsets)
    except ValueError as exc:
        return f"{offsets!r} is not {example}: {exc}"
    if not isinstance(parsed, dict) or not parsed:
        return f"{offsets!r} is not {example}"
    if set(parsed) != {topic}:
        others = ", ".join(repr(t) for t in parsed if t != topic) or "none"
        return f"{offsets!r} must name the topic {topic!r} and no other (it names {others}); {example}"
    partitions = parsed[topic]
    if not isinstance(partitions, dict) or not partitions:
        return f"{offsets!r}: {topic!r} must map partitions to offsets; {example}"
    for partition, offset in partitions.items():
        if not re.fullmatch(r"[0-9]+", partition):
            return f"{offsets!r}: partition {partition!r} is not a partition number; {example}"
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < -2:
            return (
                f"{offsets!r}: offset {offset!r} of partition {partition} is not an offset >= -2; {example}"
            )
    return None


def offsets_partitions(offsets: str) -> set[int] | None:
    """The partitions a JSON ``startingOffsets`` names (None for ``earliest``/``latest``); for an
    ``offsets`` :func:`starting_offsets_problem` takes."""
    if offsets.strip().lower() in ("earliest", "latest"):
        return None
    parsed: dict[str, dict[str, int]] = json.loads(offsets)
    return {int(p) for by_partition in parsed.values() for p in by_partition}


def local_master(master: str) -> bool:
    """Whether every executor runs on the driver's machine: ``local``, ``local[N]``,
    ``local-cluster[...]``; not ``spark://``, ``yarn``, ``k8s://``."""
    return master.strip().startswith("local")


def shared_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be the warehouse or checkpoint of a cluster, or None when it can.

    A cluster's driver and executors need an absolute path (``/shared/catalog``,
    ``file:///shared/catalog``) or an absolute URI (``hdfs://nn/catalog``, ``s3a://bucket/catalog``).
    """
    text = path.strip()
    scheme = _SCHEME.match(text)
    rest = text[scheme.end() :] if scheme else text
    if rest.startswith("/"):
        return None
    what = "a relative path" if scheme is None else f"a {scheme.group()} URI with a relative path"
    return (
        f"{path!r} is {what}: on a cluster it names a folder under the driver's current folder, "
        "which the workers do not see; use an absolute path on a file system the driver and "
        "every worker see (file:///shared/catalog on a shared mount, hdfs://namenode/catalog, "
        "s3a://bucket/catalog)"
    )


def _interval_ms(trigger: str) -> int | None:
    """``"10s"``, ``"500 ms"``, ``"2 minutes"`` -> milliseconds; anything else -> None."""
    match = _INTERVAL.match(trigger)
    if match is None:
        return None
    unit = match.group("unit")
    factor = 1 if unit.startswith(("ms", "milli")) else 1000 if unit.startswith("s") else 60_000
    return round(float(match.group("n")) * factor)


class PipelineSettingsError(ConfigError):
    """:class:`PipelineSettings` refused: ``problems`` holds each bad field with its reason, in
    the order checked, for a caller that names them its own way (the command line's options).
    ``field`` and ``reason`` are the first problem's, as any ``ConfigError`` names its field;
    the message says every problem, each field once: ``bootstrap: must not be empty; ...``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        first, why = problems[0] if problems else ("PipelineSettings", "refused")
        super().__init__(first, why)
        self.problems = list(problems)

    def __str__(self) -> str:
        return "; ".join(f"{name}: {why}" for name, why in self.problems) or super().__str__()


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(value: object) -> bool:
    return isinstance(value, str)


#: what each field of PipelineSettings takes, and how to say it
_KINDS: dict[str, tuple[Callable[[object], bool], str]] = {
    "bootstrap": (_text, "a str"),
    "topic": (_text, "a str"),
    "trigger": (_text, "a str"),
    "starting_offsets": (_text, "a str"),
    "master": (_text, "a str"),
    "warehouse": (lambda v: isinstance(v, str | os.PathLike), "a path (str or os.PathLike)"),
    "checkpoint": (lambda v: isinstance(v, str | os.PathLike), "a path (str or os.PathLike)"),
    "max_offsets_per_trigger": (lambda v: v is None or _whole(v), "a whole number, or None for no cap"),
    "compact_every": (_whole, "a whole number"),
    "deletion_vectors": (lambda v: isinstance(v, bool), "True or False"),
    "source_options": (lambda v: isinstance(v, Mapping), "a dict of str"),
    "spark_conf": (lambda v: isinstance(v, Mapping), "a dict of str"),
    "progress_group": (lambda v: v is None or isinstance(v, str), "a group name (str), or None for none"),
    "client_config": (lambda v: isinstance(v, Mapping), "a dict of librdkafka settings"),
}


def _wrong_types(settings: PipelineSettings) -> list[tuple[str, str]]:
    """Each field of ``settings`` of the wrong type, with the reason (``must be a str, got 5``):
    ``compact_every="5"`` failed with a bare ``TypeError`` from a comparison, ``topic=None`` with
    an ``AttributeError``, ``deletion_vectors="no"`` was taken as true."""
    found = []
    for f in fields(settings):  # in the order the fields are declared
        fits, what = _KINDS[f.name]
        value = getattr(settings, f.name)
        if not fits(value):  # a dict's value may hold secrets (client_config): its type only
            got = f"a {type(value).__name__}" if what.startswith("a dict") else repr(value)
            found.append((f.name, f"must be {what}, got {got}"))
    return found


@dataclass(frozen=True, kw_only=True)
class PipelineSettings:
    """What the pipeline reads, where it writes, and how it triggers. Validated on construction:
    a :class:`PipelineSettingsError` (a ``ConfigError``) names every bad field, a Spark master
    URL Spark would refuse (:func:`master_problem`) among them.

    * ``warehouse``: folder (or Hadoop URI) holding the Delta tables, ``<warehouse>/entities`` ...
      A relative path is made absolute against the current folder with a local master, and
      refused with any other (on a cluster: an absolute path all workers see, module docstring).
    * ``checkpoint``: the streaming query's checkpoint folder; a new one restarts from
      ``starting_offsets``: ``"earliest"``, ``"latest"`` or Spark's JSON of the topic's
      partitions, ``{"catalog.entities": {"0": 42, "1": -2}}`` (-2: earliest, -1: latest; Spark
      wants every partition named).
      Relative paths as for ``warehouse``.
    * ``trigger``: ``"available-now"`` (process what is there, in batches of at most
      ``max_offsets_per_trigger``, then stop) or a processing-time interval (``"10s"``,
      ``"500ms"``, ``"1 minute"``) for a continuous run; ``STREAMING_TRIGGER`` (10 s) is
      the recommended one.
    * ``max_offsets_per_trigger``: the records a batch takes at most, with either trigger
      (``DEFAULT_MAX_OFFSETS_PER_TRIGGER``: 1,000,000, the largest batch measured to fit
      Spark's default 1 GB driver); 0 or None for no cap: the whole backlog in one batch.
    * ``compact_every``: OPTIMIZE the tables every N batches (0: never).
    * ``deletion_vectors``: a batch small against ``entities`` (at most
      ``DELETION_VECTORS_SHARE_MAX`` of its entities per row) MERGEs by marking the replaced rows
      deleted (Delta deletion vectors) instead of rewriting every file that holds one; a
      larger batch, which would touch most rows anyway, rewrites. Enabled on the table when
      it is created or, for an existing table, when the pipeline starts (the table's
      protocol is upgraded: its readers need deletion vector support). For catalogs of
      millions of entities fed in small live batches; see ``ensure_tables``. A table that has
      them enabled already is MERGEd the same way with or without this option.
    * ``source_options``: passed verbatim to Spark's Kafka source
      (``"kafka.security.protocol"``, ``"failOnDataLoss"``, ...), over ``SOURCE_DEFAULTS``.
    * ``client_config``: librdkafka client settings (a ``--client-config`` file's, say): Spark's
      Kafka source gets them as the Java client's ``kafka.`` options, the progress group's
      committer as they are. Left out of the repr, as ``source_options`` is: they hold secrets.
    * ``spark_conf``: extra Spark settings for the session ``run_pipeline`` builds itself; its
      memory sizes (``spark.driver.memory``, ...) are checked as ``SessionSettings`` checks them.
    * ``progress_group``: a Kafka consumer group the run commits each landed batch's end
      offsets to, so Kafka's lag tools show the pipeline's lag (``laneway lag
      laneway-pipeline``); None for none. Spark's checkpoint stays the source of truth.
    """

    bootstrap: str
    warehouse: str
    checkpoint: str
    topic: str = "catalog.entities"
    trigger: str = AVAILABLE_NOW
    max_offsets_per_trigger: int | None = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    starting_offsets: str = "earliest"
    master: str = "local[*]"
    compact_every: int = 50
    deletion_vectors: bool = False
    source_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    progress_group: str | None = "laneway-pipeline"
    client_config: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if wrong := _wrong_types(self):  # the checks below would fail on them with a bare TypeError
            raise PipelineSettingsError(wrong)
        errors: list[tuple[str, str]] = []
        for name in ("bootstrap", "warehouse", "checkpoint", "topic", "master", "starting_offsets"):
            if not str(getattr(self, name)).strip():
                errors.append((name, "must not be empty"))
        if self.trigger != AVAILABLE_NOW:
            ms = _interval_ms(self.trigger)
            if ms is None:
                errors.append(
                    ("trigger", f"{self.trigger!r} is neither 'available-now' nor an interval like '10s'")
                )
            elif ms <= 0:
                errors.append(
                    ("trigger", f"{self.trigger!r}: an interval must be above 0 (1ms at least), like '10s'")
                )
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 0:
            errors.append(
                ("max_offsets_per_trigger", f"must be >= 0 (0: no cap), got {self.max_offsets_per_trigger}")
            )
        if self.progress_group is not None and not self.progress_group.strip():
            errors.append(("progress_group", "a group name, or None for none"))
        if self.compact_every < 0:
            errors.append(("compact_every", f"must be >= 0, got {self.compact_every}"))
        if self.master.strip() and (problem := master_problem(self.master)):
            errors.append(("master", problem))
        elif self.master.strip() and not local_master(self.master):
            for name in ("warehouse", "checkpoint"):
                path = str(getattr(self, name))
                problem = shared_path_problem(path) if path.strip() else None
                if problem:
                    errors.append((name, f"with master {self.master!r}, {problem}"))
        offsets, topic = self.starting_offsets, self.topic
        if offsets.strip() and topic.strip() and (problem := starting_offsets_problem(offsets, topic)):
            errors.append(("starting_offsets", problem))
        errors += [("spark_conf", f"{key}: {why}") for key, why in conf_size_problems(self.spark_conf)]
        try:
            spark_options(self.client_config)
        except ConfigError as exc:
            errors.append((exc.field, exc.reason))
        if errors:
            raise PipelineSettingsError(errors)
        for name in ("warehouse", "checkpoint"):
            path = str(getattr(self, name))
            if _SCHEME.match(path) is None and not path.startswith("/"):
                path = os.path.abspath(path)  # a local master's: Delta takes absolute paths only
            object.__setattr__(self, name, path)
        object.__setattr__(self, "source_options", dict(self.source_options))
        object.__setattr__(self, "spark_conf", dict(self.spark_conf))
        object.__setattr__(self, "client_config", dict(self.client_config))

    def kafka_source_options(self) -> dict[str, str]:
        """The options the pipeline gives Spark's Kafka source besides the servers, topic and
        offsets: ``SOURCE_DEFAULTS``, the batch cap (``maxOffsetsPerTrigger``, unless 0 or None),
        then ``client_config`` as the Java client's ``kafka.`` keys
        (:func:`laneway.kafka.java_config.spark_options`), overridden by ``source_options``."""
        cap = self.max_offsets_per_trigger
        limit = {"maxOffsetsPerTrigger": str(cap)} if cap else {}
        return {**SOURCE_DEFAULTS, **limit, **spark_options(self.client_config), **self.source_options}

    @property
    def trigger_interval_ms(self) -> int | None:
        """The processing-time interval in milliseconds; None for available-now."""
        return None if self.trigger == AVAILABLE_NOW else _interval_ms(self.trigger)
