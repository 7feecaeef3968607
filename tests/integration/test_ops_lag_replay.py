"""`laneway lag` and `laneway replay` through the CLI runner on the real broker."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

import confluent_kafka
import orjson
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from laneway import App, Event, Timeouts
from laneway.engine import gaps
from laneway.kafka.producer import Producer
from tests.integration.test_ops_cli import invoke, one_line_error
from tests.kafka_ready import commit_for

TopicFactory = Callable[..., str]
# records are two hours old: record i at BASE + i s (at one hour, the record at the committed offset,
# BASE + 4 s, was under an hour old when the test ran within 4 s of the import: "59m56s", not "1h..m")
BASE = int(time.time() * 1000) - 7_200_000


@pytest.fixture
def consumed(kafka_bootstrap: str, make_topic: TopicFactory, group_id: str) -> str:
    """A 2-partition topic, 10 records each; the group committed 4 on p0 and all of p1."""
    topic = make_topic(partitions=2)
    with Producer(kafka_bootstrap) as producer:
        for p in (0, 1):
            for i in range(10):
                producer.send_async(topic, {"p": p, "i": i}, partition=p, timestamp=BASE + i * 1000 + p * 500)
    commit(kafka_bootstrap, group_id, [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 10)])
    return topic


def commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        commit_for(consumer, offsets)
    finally:
        consumer.close()


def committed(admin: AdminClient, group: str) -> dict[int, int]:
    req = confluent_kafka.ConsumerGroupTopicPartitions(group)
    res = admin.list_consumer_group_offsets([req])[group].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions or []}


def test_groups_lists_each_group_with_its_topics_lag_and_finished_records(
    kafka_bootstrap: str, consumed: str, group_id: str
) -> None:
    """No command listed the consumer groups (a review): ``laneway groups`` lists each, with
    the lag ``laneway lag`` totals and the records its commit metadata names."""
    other = f"{group_id}-other"
    commit(kafka_bootstrap, other, [TopicPartition(consumed, 0, 4, metadata=gaps.encode(4, {6, 7}))])
    result = invoke(kafka_bootstrap, "groups", "--json")
    assert result.exit_code == 0, result.output
    rows = {g["group"]: g for g in orjson.loads(result.stdout)}
    assert rows[group_id] == {
        "group": group_id,
        "state": "empty",
        "members": 0,
        "topics": [consumed],
        "lag": 6,
        "finished_beyond": 0,
        "error": None,
    }
    # partition 1 has no offset of this group: counted from its start, as `laneway lag` counts it
    assert (rows[other]["lag"], rows[other]["finished_beyond"]) == (16, 2)
    assert orjson.loads(invoke(kafka_bootstrap, "lag", other, "--json").stdout)["total_lag"] == 16

    table = invoke(kafka_bootstrap, "groups")
    assert table.exit_code == 0, table.output
    line = next(x for x in table.stdout.splitlines() if group_id in x and other not in x)
    assert re.search(
        rf"{re.escape(group_id)}\s*\S\s*empty\s*\S\s*0\s*\S\s*{re.escape(consumed)}\s*\S\s*6\b", line
    ), line


def test_lag_per_partition(kafka_bootstrap: str, consumed: str, group_id: str) -> None:
    result = invoke(kafka_bootstrap, "lag", group_id, "--json")
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.stdout)
    assert data["group"] == group_id and data["total_lag"] == 6 and data["members"] == 0
    p0, p1 = data["partitions"]
    assert (p0["topic"], p0["partition"], p0["committed"], p0["end"], p0["lag"]) == (consumed, 0, 4, 10, 6)
    assert p0["oldest_unconsumed_timestamp"] == BASE + 4000  # the record at the committed offset
    assert 7100 < p0["oldest_unconsumed_age_seconds"] < 3600 * 24
    assert (p1["committed"], p1["lag"], p1["oldest_unconsumed_timestamp"]) == (10, 0, None)

    table = invoke(kafka_bootstrap, "lag", group_id)
    assert table.exit_code == 0
    assert f"group {group_id}" in table.stdout and "total lag 6" in table.stdout
    assert "oldest unconsumed" in table.stdout and re.search(r"\b\d+h\d\dm\b", table.stdout)  # hours old

    live = invoke(kafka_bootstrap, "lag", group_id, "--watch", "--interval", "0.1", "--refreshes", "2")
    assert live.exit_code == 0 and live.stdout.count("total lag 6") == 2  # piped: a table per look

    watched = invoke(
        kafka_bootstrap, "lag", group_id, "--watch", "--interval", "0.1", "--refreshes", "2", "--json"
    )
    assert watched.exit_code == 0
    assert [orjson.loads(line)["total_lag"] for line in watched.stdout.splitlines()] == [6, 6]


def test_lag_counts_the_partitions_an_empty_group_never_committed(
    kafka_bootstrap: str, make_topic: TopicFactory, group_id: str
) -> None:
    """A review: an app halted after committing one partition of eight; `laneway lag` listed
    that partition only, and its total lag left out the others' records (21,196 of ~100,000)."""
    topic = make_topic(partitions=3)
    with Producer(kafka_bootstrap) as producer:
        for p in (0, 1, 2):
            for i in range(5 + p):
                producer.send_async(topic, {"p": p, "i": i}, partition=p)
    commit(kafka_bootstrap, group_id, [TopicPartition(topic, 1, 2)])
    result = invoke(kafka_bootstrap, "lag", group_id, "--json")
    assert result.exit_code == 0, result.output
    data = orjson.loads(result.stdout)
    rows = {row["partition"]: (row["committed"], row["end"], row["lag"]) for row in data["partitions"]}
    assert rows == {0: (None, 5, 5), 1: (2, 6, 4), 2: (None, 7, 7)}
    assert data["total_lag"] == 16


def test_lag_unknown_group(kafka_bootstrap: str) -> None:
    result = invoke(kafka_bootstrap, "lag", f"nobody-{uuid.uuid4().hex[:6]}")
    assert "unknown consumer group" in one_line_error(result)


def test_replay_dry_run_then_shift_time_offset(
    kafka_bootstrap: str, kafka_admin: AdminClient, consumed: str, group_id: str
) -> None:
    plan = invoke(kafka_bootstrap, "replay", group_id, "--to-earliest", "--dry-run")
    assert plan.exit_code == 0, plan.output
    assert "dry run: nothing changed" in plan.stdout and "plan for" in plan.stdout
    assert committed(kafka_admin, group_id) == {0: 4, 1: 10}

    shifted = invoke(kafka_bootstrap, "replay", group_id, "--shift", "-2")
    assert shifted.exit_code == 0, shifted.output
    assert "before:" in shifted.stdout and "after:" in shifted.stdout
    assert committed(kafka_admin, group_id) == {0: 2, 1: 8}

    when = datetime.fromtimestamp((BASE + 6000) / 1000, UTC).isoformat()  # p0 record 6, p1 record 6 (+0.5s)
    by_time = invoke(kafka_bootstrap, "replay", group_id, "--to-time", when, "--json")
    assert by_time.exit_code == 0, by_time.output
    data = orjson.loads(by_time.stdout)
    assert data["applied"] is True
    assert [(r["before"], r["after"]) for r in data["partitions"]] == [(2, 6), (8, 6)]
    assert committed(kafka_admin, group_id) == {0: 6, 1: 6}

    # far in the future: nothing at or after it, so the end
    assert invoke(kafka_bootstrap, "replay", group_id, "--to-time", "2099-01-01T00:00").exit_code == 0
    assert committed(kafka_admin, group_id) == {0: 10, 1: 10}

    assert invoke(kafka_bootstrap, "replay", group_id, "--to-offset", "0:3").exit_code == 0
    assert committed(kafka_admin, group_id) == {0: 3, 1: 10}
    past = invoke(kafka_bootstrap, "replay", group_id, "--to-offset", f"{consumed}:1:99")
    assert past.exit_code == 0, past.output
    assert committed(kafka_admin, group_id) == {0: 3, 1: 10}  # clamped to the end, and said so
    assert past.stderr.splitlines() == [
        f"warning: {consumed}:1: offset 99 is past the partition's end offset 10; "
        "replay stops at the end (10): nothing there is replayed"
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--to-time", "20-11-2026 10am"], "malformed time '20-11-2026 10am'"),
        (["--to-offset", "zero:1"], "malformed offset"),
        (["--to-offset", "7:1"], "is not among the group's partitions"),
        (["--to-earliest", "--shift", "1"], "give exactly one of"),
        ([], "give exactly one of"),
        (["--to-earliest", "--topic", "no-such-topic-y"], "unknown topic 'no-such-topic-y'"),
    ],
)
def test_replay_bad_input_changes_nothing(
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    consumed: str,
    group_id: str,
    args: list[str],
    expected: str,
) -> None:
    assert expected in one_line_error(invoke(kafka_bootstrap, "replay", group_id, *args))
    assert committed(kafka_admin, group_id) == {0: 4, 1: 10}


def test_replay_unknown_group(kafka_bootstrap: str) -> None:
    assert "unknown consumer group" in one_line_error(
        invoke(kafka_bootstrap, "replay", f"nobody-{uuid.uuid4().hex[:6]}", "--to-earliest")
    )


def test_replay_refuses_a_live_group_unless_new_group(
    kafka_bootstrap: str, kafka_admin: AdminClient, consumed: str, group_id: str
) -> None:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group_id, "enable.auto.commit": False}
    )
    consumer.subscribe([consumed])
    try:
        for _ in range(100):  # until the member has joined and got its partitions
            consumer.poll(0.2)
            if consumer.assignment():
                break
        assert consumer.assignment()
        planned = invoke(kafka_bootstrap, "replay", group_id, "--to-earliest", "--dry-run")
        assert planned.exit_code == 0 and "dry run: nothing changed" in planned.stdout
        assert "1 live member(s): the real run is refused" in planned.stderr  # said before it is tried
        refused = invoke(kafka_bootstrap, "replay", group_id, "--to-earliest")
        assert "live member" in refused.stderr and refused.exit_code == 2
        assert "before:" not in refused.stdout  # refused before it printed a plan it will not apply
        assert committed(kafka_admin, group_id) == {0: 4, 1: 10}

        fresh = f"{group_id}-replay"
        moved = invoke(kafka_bootstrap, "replay", group_id, "--to-earliest", "--new-group", fresh)
        assert moved.exit_code == 0, moved.output
        assert committed(kafka_admin, fresh) == {0: 0, 1: 0}
        assert committed(kafka_admin, group_id) == {0: 4, 1: 10}  # the live group is untouched
        lag = orjson.loads(invoke(kafka_bootstrap, "lag", group_id, "--json").stdout)
        assert lag["members"] == 1 and lag["state"] == "stable"
    finally:
        consumer.close()


def test_replay_one_partition_into_a_new_group_keeps_the_others(
    kafka_bootstrap: str, kafka_admin: AdminClient, consumed: str, group_id: str
) -> None:
    """A --to-offset of one partition with --new-group: the new group takes the group's offset of
    every other partition as it is, so only the partition named is replayed (a new group without
    an offset would start the others from earliest: 10 records of p1 nobody asked for)."""
    fresh = f"{group_id}-one"
    planned = invoke(
        kafka_bootstrap, "replay", group_id, "--to-offset", "0:2", "--new-group", fresh, "--dry-run", "--json"
    )
    assert planned.exit_code == 0, planned.output
    rows = {
        r["partition"]: (r["before"], r["after"], r["kept"])
        for r in orjson.loads(planned.stdout)["partitions"]
    }
    assert rows == {0: (4, 2, False), 1: (10, 10, True)}
    table = invoke(
        kafka_bootstrap, "replay", group_id, "--to-offset", "0:2", "--new-group", fresh, "--dry-run"
    )
    assert re.search(r"\b1\s*\S\s*10\s*\S\s*10\s*\S\s*kept\b", table.stdout), table.stdout
    moved = invoke(kafka_bootstrap, "replay", group_id, "--to-offset", "0:2", "--new-group", fresh)
    assert moved.exit_code == 0, moved.output
    assert (
        f"moved 1 partition(s) of {fresh}; gave it {group_id}'s offsets of 1 more, as they are"
        in " ".join(moved.stdout.split())
    )
    assert committed(kafka_admin, fresh) == {0: 2, 1: 10}
    assert committed(kafka_admin, group_id) == {0: 4, 1: 10}


def commits(admin: AdminClient, group: str) -> dict[int, tuple[int, str | None]]:
    """The group's committed offsets with their metadata (None for none)."""
    req = confluent_kafka.ConsumerGroupTopicPartitions(group)
    res = admin.list_consumer_group_offsets([req])[group].result(30)
    return {tp.partition: (tp.offset, tp.metadata or None) for tp in res.topic_partitions or []}


def test_replay_into_a_new_group_keeps_what_the_group_finished_beyond_the_kept_offsets(
    kafka_bootstrap: str, kafka_admin: AdminClient, consumed: str, group_id: str
) -> None:
    """A kept partition's commit goes to the new group with its metadata, so the new group skips
    the records the group had finished beyond its offset; the partition replayed starts at its new
    offset with none, and skips nothing. Counted per record: the new group processes 12, not 15
    (the kept offset without its metadata redid 3 finished records of p1)."""
    p0 = gaps.encode(4, {6, 7})  # finished beyond 4 on p0: the replay from 2 must redo them
    p1 = gaps.encode(3, {4, 5, 8})  # finished beyond 3 on p1: the new group must skip them
    commit(
        kafka_bootstrap,
        group_id,
        [TopicPartition(consumed, 0, 4, metadata=p0), TopicPartition(consumed, 1, 3, metadata=p1)],
    )
    fresh = f"{group_id}-meta"
    moved = invoke(kafka_bootstrap, "replay", group_id, "--to-offset", "0:2", "--new-group", fresh)
    assert moved.exit_code == 0, moved.output
    assert commits(kafka_admin, fresh) == {0: (2, None), 1: (3, p1)}
    assert commits(kafka_admin, group_id) == {0: (4, p0), 1: (3, p1)}

    seen, skipped = _run_to_the_end(kafka_bootstrap, kafka_admin, consumed, fresh)
    assert seen == Counter([(0, o) for o in range(2, 10)] + [(1, o) for o in (3, 6, 7, 9)])
    assert skipped == 3


def _run_to_the_end(
    bootstrap: str, admin: AdminClient, topic: str, group: str
) -> tuple[Counter[tuple[int, int]], int]:
    """Run an app of ``group`` on ``topic`` until its commits reach the end (10 on each of its 2
    partitions): what it processed, per (partition, offset), and what it skipped."""
    seen: Counter[tuple[int, int]] = Counter()
    lock = threading.Lock()
    app = App(
        "replayed",
        bootstrap_servers=bootstrap,
        group_id=group,
        timeouts=Timeouts(commit_interval=0.2, shutdown=2, revoke=1),
    )

    @app.handler(topic, on_failure="halt")
    def count(ev: Event) -> None:
        with lock:
            seen[(ev.partition, ev.offset)] += 1

    assert app.run_until(lambda: committed(admin, group) == {0: 10, 1: 10}, timeout=60)
    assert app.processor is not None
    return seen, app.processor.skipped()


def test_replay_new_group_refuses_a_group_that_exists(
    kafka_bootstrap: str, kafka_admin: AdminClient, consumed: str, group_id: str
) -> None:
    """A stopped group's id given to --new-group: refused, naming it; its offsets kept."""
    stopped = f"{group_id}-old"
    commit(kafka_bootstrap, stopped, [TopicPartition(consumed, 0, 1), TopicPartition(consumed, 1, 2)])
    for args in (["--dry-run"], []):
        error = one_line_error(
            invoke(kafka_bootstrap, "replay", group_id, "--to-latest", "--new-group", stopped, *args)
        )
        assert f"consumer group {stopped!r} already exists" in error, error
        assert f"laneway replay {stopped} ... (without --new-group)" in error, error
    assert committed(kafka_admin, stopped) == {0: 1, 1: 2}
    assert committed(kafka_admin, group_id) == {0: 4, 1: 10}


def test_replay_refuses_a_topic_the_group_does_not_read(
    kafka_bootstrap: str, kafka_admin: AdminClient, consumed: str, group_id: str, make_topic: TopicFactory
) -> None:
    """``--topic`` limits a replay to some of the group's topics: another topic would get offsets
    for a group that never reads it (a review saw 80,000 records of lag no one had)."""
    other = make_topic(partitions=2, prefix="other")
    for dry in ([], ["--dry-run"]):
        error = one_line_error(
            invoke(kafka_bootstrap, "replay", group_id, "--to-earliest", "--topic", other, *dry)
        )
        assert f"does not read {other}: it reads {consumed}" in error
    assert committed(kafka_admin, group_id) == {0: 4, 1: 10}


def test_replay_refuses_a_partition_or_a_topic_given_twice(
    kafka_bootstrap: str, kafka_admin: AdminClient, consumed: str, group_id: str
) -> None:
    """``--to-offset 1:3 --to-offset 1:5`` kept the last one without a word; a partition named by
    number and by topic did too; ``--topic`` twice printed each row twice, and its real run failed
    with the broker's "Duplicate partitions not allowed" after printing its plan."""
    cases = [
        (["--to-offset", "1:3", "--to-offset", "1:5"], "partition 1 is given twice (1:3 and 1:5)"),
        (
            ["--to-offset", "1:3", "--to-offset", f"{consumed}:1:5"],
            f"partition {consumed}:1 is given twice (1:3 and {consumed}:1:5)",
        ),
        (["--to-earliest", "-t", consumed, "-t", consumed], f"--topic {consumed} is given twice"),
    ]
    for args, said in cases:
        for dry in ([], ["--dry-run"]):
            result = invoke(kafka_bootstrap, "replay", group_id, *args, *dry)
            assert said in one_line_error(result)
            assert result.stdout == ""  # no plan printed
    assert committed(kafka_admin, group_id) == {0: 4, 1: 10}


def _after_rows(table: str) -> dict[int, tuple[int | None, int]]:
    """The ``after:`` table's rows of a replay's output: partition to (before, after)."""
    rows = {}
    for line in table.split("after:", 1)[1].splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if len(cells) == 7 and cells[1].isdigit():
            rows[int(cells[1])] = (None if cells[2] == "-" else int(cells[2]), int(cells[3]))
    return rows


def test_replay_into_a_new_group_says_the_same_before_in_json_and_in_the_table(
    kafka_bootstrap: str, kafka_admin: AdminClient, consumed: str, group_id: str
) -> None:
    """With --new-group, --json said ``"before": null`` (the new group had no offsets) where the
    table showed the group's offsets: both show the group's committed offsets, the ones the new
    group starts from."""
    args = ("replay", group_id, "--to-offset", "0:2", "--new-group")
    as_json = invoke(kafka_bootstrap, *args, f"{group_id}-json", "--json")
    assert as_json.exit_code == 0, as_json.output
    data = orjson.loads(as_json.stdout)
    assert data["applied"] is True
    rows = {r["partition"]: (r["before"], r["after"]) for r in data["partitions"]}
    assert rows == {0: (4, 2), 1: (10, 10)}
    as_table = invoke(kafka_bootstrap, *args, f"{group_id}-table")
    assert as_table.exit_code == 0, as_table.output
    assert _after_rows(as_table.stdout) == rows, as_table.stdout
    assert (
        committed(kafka_admin, f"{group_id}-json")
        == committed(kafka_admin, f"{group_id}-table")
        == {0: 2, 1: 10}
    )


def test_replay_sets_a_new_group_s_offsets_from_a_to_offset_naming_its_topic(
    kafka_bootstrap: str, kafka_admin: AdminClient, consumed: str, group_id: str
) -> None:
    """A group with no offsets yet: ``--to-offset TOPIC:P:O`` was refused ("unknown consumer
    group", exit 2) unless ``--topic TOPIC`` named the topic too (a new-user review); the offset
    names it."""
    fresh = f"{group_id}-fresh"
    spec = f"{consumed}:1:3"
    planned = invoke(kafka_bootstrap, "replay", fresh, "--to-offset", spec, "--dry-run", "--json")
    assert planned.exit_code == 0, planned.output
    rows = [
        (r["topic"], r["partition"], r["before"], r["after"])
        for r in orjson.loads(planned.stdout)["partitions"]
    ]
    assert rows == [(consumed, 1, None, 3)]
    table = invoke(kafka_bootstrap, "replay", fresh, "--to-offset", spec, "--dry-run")
    assert table.exit_code == 0 and "dry run: nothing changed" in table.stdout, table.output
    assert committed(kafka_admin, fresh) == {}
    moved = invoke(kafka_bootstrap, "replay", fresh, "--to-offset", spec, "--to-offset", "0:7")
    assert moved.exit_code == 0, moved.output
    assert committed(kafka_admin, fresh) == {0: 7, 1: 3}
    # a bare partition names no topic: refused, saying how to name one; nothing changes
    other = f"{group_id}-other"
    error = one_line_error(invoke(kafka_bootstrap, "replay", other, "--to-offset", "1:3", "--dry-run"))
    assert error == (
        f"error: unknown consumer group {other!r} (no members, no committed offsets): to set its offsets "
        "ahead of its first start, name the topic (--topic TOPIC, or --to-offset TOPIC:PARTITION:OFFSET)"
    )
    assert committed(kafka_admin, other) == {}


def test_replay_that_leaves_an_offset_where_it_is_keeps_its_metadata_and_a_move_counts_what_runs_again(
    kafka_bootstrap: str, kafka_admin: AdminClient, consumed: str, group_id: str
) -> None:
    """``--shift 0`` wrote each offset again without its commit metadata, so the group ran again
    the records it had finished beyond it, without a word (a review). An offset left where it is
    keeps its metadata: counted per record, the group then runs only what it had not finished.
    A move writes the offset without the metadata, and the plan counts the finished records
    that run again."""
    p0 = gaps.encode(4, {6, 7})
    p1 = gaps.encode(3, {4, 5, 8})
    commit(
        kafka_bootstrap,
        group_id,
        [TopicPartition(consumed, 0, 4, metadata=p0), TopicPartition(consumed, 1, 3, metadata=p1)],
    )
    same = invoke(kafka_bootstrap, "replay", group_id, "--shift", "0")
    assert same.exit_code == 0, same.output
    assert "run again" not in same.output
    assert (
        f"moved 0 partition(s) of {group_id}; 2 already at the offset asked for, left as they were "
        "with their commit metadata"
    ) in " ".join(same.output.split())
    assert commits(kafka_admin, group_id) == {0: (4, p0), 1: (3, p1)}

    plan = invoke(
        kafka_bootstrap, "replay", group_id, "--to-offset", f"{consumed}:1:5", "--dry-run", "--json"
    )
    assert plan.exit_code == 0, plan.output
    (row,) = orjson.loads(plan.stdout)["partitions"]
    assert (row["partition"], row["before"], row["after"], row["rerun"]) == (1, 3, 5, 2)  # 5 and 8
    assert row["skips"] == 1  # 3: not finished, and passed (4 was)
    moved = invoke(kafka_bootstrap, "replay", group_id, "--to-offset", f"{consumed}:1:5")
    assert moved.exit_code == 0, moved.output
    assert f"moved 1 partition(s) of {group_id}\n" in moved.stdout
    assert (
        "2 record(s) the group had finished beyond its committed offsets will run again from the new "
        f"offsets ({consumed}:1 2): the commit metadata that named them is not written"
    ) in " ".join(moved.output.split())
    assert (
        f"up to 1 record(s) between the committed and the new offsets that the group had not finished "
        f"will never run ({consumed}:1 1)"
    ) in " ".join(moved.output.split())
    assert commits(kafka_admin, group_id) == {0: (4, p0), 1: (5, None)}

    seen, _ = _run_to_the_end(kafka_bootstrap, kafka_admin, consumed, group_id)
    assert seen == Counter([(0, o) for o in (4, 5, 8, 9)] + [(1, o) for o in range(5, 10)])
