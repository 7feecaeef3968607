"""How long Spark's Kafka source takes to read a range that ends at the end of the log.

``python -m bench.spark_log_end [--records 300000] [--repeats 3]`` (``LANEWAY_BOOTSTRAP`` or
``--bootstrap``) produces a ``catalog.entities``-shaped topic of 8 partitions, then batch-reads
(``spark.read.format("kafka")``, ``local[2]``) a third of every partition at a time and prints
the wall time of each read:

* ``first`` and ``middle``: two thirds that stop short of the end of the log;
* ``to-end``: the last third, ending at each partition's end offset, as every micro-batch of
  a live stream does, at Kafka's default ``fetch.max.wait.ms`` (500 ms) and with the
  pipeline's ``laneway.spark.settings.SOURCE_DEFAULTS``;
* ``to-end-2``: the last third less two records per partition (the wait is on the prefetch
  the consumer sends before it returns what it has, so stopping just short does not avoid it).

Why the pipeline sets a short ``kafka.fetch.max.wait.ms`` (``SOURCE_DEFAULTS``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bench.spark_common import cli, parse


def main(argv: list[str]) -> int:
    parser = cli("bench.spark_log_end", __doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parse(parser, argv)

    from confluent_kafka import Consumer, TopicPartition

    from bench.kafka_io import Kafka
    from bench.spark_common import produce_entities
    from laneway.spark.session import SessionSettings, build_session
    from laneway.spark.settings import SOURCE_DEFAULTS

    kafka = Kafka(args.bootstrap)
    topic = kafka.topic("spark-log-end", 8)
    produce_entities(args.bootstrap, topic, args.records, args.records // 10)
    probe = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "bench-probe"})
    ends = [probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(8)]
    probe.close()
    session = build_session(SessionSettings(master="local[2]", app_name="laneway-bench-log-end"))

    def read(lo: list[int], hi: list[int], options: dict[str, str]) -> float:
        reader = (
            session.read.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", json.dumps({topic: {str(p): lo[p] for p in range(8)}}))
            .option("endingOffsets", json.dumps({topic: {str(p): hi[p] for p in range(8)}}))
            .options(**options)
        )
        t0 = time.monotonic()
        reader.load().selectExpr("sum(length(value))").first()
        return time.monotonic() - t0

    third = [e // 3 for e in ends]
    two = [2 * t for t in third]
    ranges: list[tuple[str, list[int], list[int], dict[str, Any]]] = [
        ("first", [0] * 8, third, {}),
        ("middle", third, two, {}),
        ("to-end", two, ends, {}),
        ("to-end-2", [x - 2 for x in two], [e - 2 for e in ends], {}),
        ("to-end, SOURCE_DEFAULTS", two, ends, dict(SOURCE_DEFAULTS)),
    ]
    try:
        print(f"{args.records:,} records on {topic}; reads of {sum(third):,} records each, wall s")
        for rep in range(args.repeats):
            print(
                f"rep {rep}: " + "  ".join(f"{n} {read(lo, hi, o):.2f}" for n, lo, hi, o in ranges),
                flush=True,
            )
    finally:
        session.stop()
        kafka.delete_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
