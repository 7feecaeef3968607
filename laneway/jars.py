"""Fetch the JVM artifacts Laneway needs from Maven Central, into a cache outside git.

Two bundles, each described by a small pom beside this module (``jvm/``):

* ``kafka``: the Apache Kafka broker (KRaft) and its runtime dependencies.
* ``spark``: the Structured Streaming Kafka connector and Delta Lake, pinned to
  the installed pyspark.

``mvn dependency:copy-dependencies`` copies each bundle into
``$LANEWAY_CACHE/<bundle>-<version>/libs`` (default ``~/.cache/laneway``). A bundle
that was fetched completely (a ``.complete`` marker) is reused as it is.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from laneway.errors import ConfigError, LanewayError

__all__ = [
    "DELTA_VERSION",
    "KAFKA",
    "KAFKA_VERSION",
    "SPARK",
    "SPARK_VERSION",
    "Bundle",
    "JarFetchError",
    "cache_dir",
    "ensure",
]

logger = logging.getLogger(__name__)

KAFKA_VERSION = "4.4.0"
SPARK_VERSION = "4.2.0"
DELTA_VERSION = "4.4.0"

_POMS = Path(__file__).with_name("jvm")


class JarFetchError(LanewayError, RuntimeError):
    """Maven could not fetch a bundle; the message quotes Maven's output."""


@dataclass(frozen=True)
class Bundle:
    name: str
    version: str
    pom: str

    def libs(self, root: Path | None = None) -> Path:
        return (root or cache_dir()) / f"{self.name}-{self.version}" / "libs"


KAFKA = Bundle("kafka", KAFKA_VERSION, "kafka-pom.xml")
SPARK = Bundle("spark-extras", f"{SPARK_VERSION}-delta{DELTA_VERSION}", "spark-pom.xml")


def cache_dir() -> Path:
    """``$LANEWAY_CACHE``, else ``~/.cache/laneway``: the jars, and the broker's record and
    logs. Set but empty, it is refused (:class:`~laneway.errors.ConfigError`): taken as the
    current folder, jars and a broker record went wherever the command ran."""
    value = os.environ.get("LANEWAY_CACHE")
    if value is None:
        return Path.home() / ".cache" / "laneway"
    if not value.strip():
        raise ConfigError(
            "LANEWAY_CACHE", "is set but empty: set it to a folder, or unset it (then ~/.cache/laneway)"
        )
    return Path(value)


def ensure(bundle: Bundle, *, root: Path | None = None) -> Path:
    """Return the folder of ``bundle``'s jars, fetching it with Maven when absent."""
    libs = bundle.libs(root)
    marker = libs.parent / ".complete"
    if marker.exists() and any(libs.glob("*.jar")):
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarFetchError("Maven ('mvn') is not on PATH; it is needed to fetch jars from Maven Central")
    if libs.exists():
        shutil.rmtree(libs)
    libs.parent.mkdir(parents=True, exist_ok=True)
    print(f"laneway: fetching {bundle.name} {bundle.version} jars from Maven Central ...", file=sys.stderr)
    cmd = [
        mvn,
        "-q",
        "-B",
        "-s",
        str(_POMS / "settings.xml"),
        "-f",
        str(_POMS / bundle.pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={libs}",
        "-DincludeScope=runtime",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise JarFetchError(f"mvn failed fetching {bundle.name} (exit {proc.returncode}):\n{tail}")
    marker.write_text(bundle.version)
    return libs


def main() -> None:
    """``python -m laneway.jars [kafka] [spark]``: fetch the named bundles (default: both)."""
    wanted = sys.argv[1:] or ["kafka", "spark"]
    bundles = {"kafka": KAFKA, "spark": SPARK}
    for name in wanted:
        print(ensure(bundles[name]))


if __name__ == "__main__":
    main()
