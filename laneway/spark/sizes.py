"""Spark's memory sizes (``1g``, ``512m``), checked before a JVM starts.

Spark reads a size with ``JavaUtils.byteStringAs``: a whole number and an optional unit
``b``, ``k``/``kb``, ``m``/``mb``, ``g``/``gb``, ``t``/``tb`` or ``p``/``pb``, in any case,
spaces around it ignored; a number without a unit is in the setting's own unit (MiB for
``spark.executor.memory``, bytes for ``spark.driver.maxResultSize``).

The driver's heap is stricter. The session's JVM starts in this process with
``-Xmx<spark.driver.memory>``, the value as it is (Spark's ``SparkSubmitCommandBuilder``), and
the JVM takes a whole number above 0 with ``k``, ``m``, ``g`` or ``t`` only: ``-Xmx1gb`` and
``-Xmx 1g`` are invalid, and ``-Xmx2048`` is 2048 bytes, too small a heap. pyspark then says only
``[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

__all__ = ["CONF_SIZES", "conf_size_problems", "heap_size_problem", "size_problem"]

#: the units ``byteStringAs`` takes, lower case
_UNITS = frozenset({"b", "k", "kb", "m", "mb", "g", "gb", "t", "tb", "p", "pb"})
_SIZE = re.compile(r"([0-9]+)([a-z]+)?", re.ASCII)
#: the JVM's ``-Xmx``: no space, no ``b``, ``kb`` ... ``pb``
_HEAP = re.compile(r"([0-9]+)[kmgt]", re.ASCII | re.IGNORECASE)
#: what Java's ``String.trim()`` removes: every character up to the space
_JAVA_SPACE = "".join(map(chr, range(0x21)))
_LONG_MAX = 2**63 - 1  # Long.parseLong's limit

SIZE_FORMS = (
    "a whole number with an optional unit b, k, m, g, t or p (or kb, mb, gb, tb, pb), like '1g' or '512m'"
)
HEAP_FORMS = "a whole number above 0 with a unit k, m, g or t (the driver JVM's -Xmx), like '1g' or '512m'"


def size_problem(value: str) -> str | None:
    """Why Spark's ``byteStringAs`` would refuse ``value``, or None when it takes it."""
    match = _SIZE.fullmatch(value.lower().strip(_JAVA_SPACE))
    if match is None or (match[2] is not None and match[2] not in _UNITS) or int(match[1]) > _LONG_MAX:
        return f"must be {SIZE_FORMS}, got {value!r}"
    return None


def heap_size_problem(value: str) -> str | None:
    """Why the driver's JVM would refuse ``value`` as ``spark.driver.memory`` (``-Xmx<value>``),
    or None when it takes it: a size Spark takes may still be one the JVM refuses."""
    match = _HEAP.fullmatch(value)
    if match is not None and int(match[1]) > 0:
        return None
    if match is not None or size_problem(value) is not None or value != value.strip(_JAVA_SPACE):
        why = ""  # 0 (HEAP_FORMS says above 0), spaces around it, or no size at all
    elif value.isascii() and value.isdigit():
        why = ": without a unit the JVM reads bytes (Spark reads MiB), add one"
    else:
        why = ": Spark reads that unit, the JVM's -Xmx does not"
    return f"must be {HEAP_FORMS}, got {value!r}{why}"


#: the memory sizes of a session's Spark settings, each with its check; any other setting is
#: passed to Spark as it is
CONF_SIZES: Mapping[str, Callable[[str], str | None]] = {
    "spark.driver.memory": heap_size_problem,  # over SessionSettings.driver_memory
    "spark.driver.memoryOverhead": size_problem,
    "spark.driver.maxResultSize": size_problem,
    "spark.executor.memory": size_problem,  # a worker starts the executor with its own -Xmx, in MiB
    "spark.executor.memoryOverhead": size_problem,
}


def conf_size_problems(conf: Mapping[str, object]) -> list[tuple[str, str]]:
    """Each memory size in the Spark settings ``conf`` Spark or the driver's JVM would refuse,
    with the reason (:data:`CONF_SIZES`); a value that is not a str is checked as Spark gets it."""
    return [
        (key, problem)
        for key, check in CONF_SIZES.items()
        if key in conf and (problem := check(str(conf[key]))) is not None
    ]
