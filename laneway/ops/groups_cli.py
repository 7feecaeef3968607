"""``laneway groups``, ``laneway lag`` and ``laneway replay``: the consumer groups, a group's
lag, and resets of its offsets.

The logic lives in :mod:`laneway.kafka.groups` and :mod:`laneway.kafka.replay`;
:mod:`laneway.ops.kafka_cli` adds these commands to the root app.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Annotated, Any

import orjson
import typer
from rich.live import Live
from rich.table import Table

from laneway.kafka.groups import GroupLag, group_lag, group_state, list_groups
from laneway.kafka.replay import (
    ResetPlan,
    ResetTarget,
    apply_reset,
    check_no_live_members,
    plan_reset,
)
from laneway.ops import cli_common as common
from laneway.ops.bootstrap import Bootstrap, with_client_config
from laneway.ops.cli_common import Json
from laneway.ops.parsing import parse_partition_offsets, parse_time

__all__ = ["groups", "lag", "replay"]


# -- groups ----------------------------------------------------------------------------


@with_client_config
@common.tool_errors
def groups(bootstrap: Bootstrap = None, json: Json = False) -> None:
    """The consumer groups of the cluster: state, members, the topics each has committed
    offsets on, its lag in all, and the records finished beyond its committed offsets.

    Example: laneway groups (then: laneway lag GROUP for one group's partitions)
    """
    _, admin = common.connect(bootstrap)
    found = list_groups(admin)
    if json:
        common.echo_json([{**vars(g), "topics": list(g.topics)} for g in found])
        return
    if not found:
        typer.echo("no consumer groups")
        return
    table = Table(
        "group", "state", "members", "topics", "lag", "finished beyond", title=f"{len(found)} group(s)"
    )
    for g in found:
        table.add_row(
            g.group,
            g.state,
            str(g.members),
            ", ".join(g.topics) or "-",
            common.opt(g.lag),
            common.opt(g.finished_beyond),
        )
    common.console().print(table)
    for g in found:
        if g.error is not None:  # the others are listed: one group the ACLs hide is no reason to fail
            typer.secho(f"warning: group {g.group}: {g.error}", err=True, fg=typer.colors.YELLOW)


# -- lag -------------------------------------------------------------------------------


def _lag_table(lag: GroupLag) -> Table:
    when = datetime.fromtimestamp(lag.at, UTC).strftime("%H:%M:%S UTC")
    table = Table(
        "topic",
        "partition",
        "committed",
        "end",
        "lag",
        "finished beyond",
        "oldest unconsumed",
        title=f"group {lag.group} ({lag.state}, {lag.members} member(s)): total lag {lag.total} at {when}",
    )
    for p in lag.partitions:
        table.add_row(
            p.topic,
            str(p.partition),
            common.opt(p.committed),
            str(p.end),
            str(p.lag),
            common.opt(p.finished_beyond),
            common.age(p.oldest_age),
        )
    return table


def _lag_json(lag: GroupLag) -> dict[str, Any]:
    return {
        "group": lag.group,
        "state": lag.state,
        "members": lag.members,
        "total_lag": lag.total,
        "at": lag.at,
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "committed": p.committed,
                "end": p.end,
                "lag": p.lag,
                "finished_beyond": p.finished_beyond,
                "oldest_unconsumed_timestamp": p.oldest_timestamp,
                "oldest_unconsumed_age_seconds": p.oldest_age,
            }
            for p in lag.partitions
        ],
    }


def _group_given(group: str) -> None:
    """An empty group id exits 2 with one line (the broker's raw ``INVALID_GROUP_ID`` before)."""
    if not group.strip():
        raise common.fail("GROUP: must not be empty: give a consumer group id")


@with_client_config
@common.tool_errors
def lag(
    group: Annotated[str, typer.Argument(help="consumer group id")],
    watch: Annotated[bool, typer.Option("--watch", "-w", help="refresh until Ctrl-C")] = False,
    interval: Annotated[
        float | None, typer.Option(help="seconds between refreshes with --watch (default 2)")
    ] = None,
    refreshes: Annotated[int, typer.Option(hidden=True, help="stop --watch after this many (tests)")] = 0,
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """Per partition: committed offset, end offset, lag, records finished beyond the committed
    offset (a restart skips them), and age of the oldest unconsumed record.

    --watch redraws the table in place on a terminal; piped (to a file, less), it prints one
    table per interval instead (with --json: one JSON document a line).

    Example: laneway lag orders-service --watch --interval 5
    """
    _group_given(group)
    if interval is not None and not watch:  # it was ignored without a word
        raise common.fail(f"--interval {interval:g} needs --watch (without it, lag prints once)")
    interval = 2.0 if interval is None else interval
    if not 0 < interval < math.inf:  # time.sleep refuses a negative, NaN or endless pause with a traceback
        raise common.fail(f"--interval must be a number of seconds more than 0, not {interval:g}")
    address, admin = common.connect(bootstrap)
    if not watch:
        result = group_lag(admin, address, group)
        if json:
            common.echo_json(_lag_json(result))
        else:
            common.console().print(_lag_table(result))
        return
    console = common.console()
    try:
        if json or not console.is_terminal:  # piped: one JSON document or table per interval
            count = 0
            while True:
                lag_now = group_lag(admin, address, group)
                if json:
                    typer.echo(orjson.dumps(_lag_json(lag_now)).decode())
                else:
                    console.print(_lag_table(lag_now))
                    console.file.flush()  # a pipe buffers: a reader (tail -f, less) sees each table now
                count += 1
                if refreshes and count >= refreshes:
                    return
                time.sleep(interval)
        with Live(_lag_table(group_lag(admin, address, group)), console=console, auto_refresh=False) as live:
            count = 1
            while not refreshes or count < refreshes:
                time.sleep(interval)
                live.update(_lag_table(group_lag(admin, address, group)), refresh=True)
                count += 1
    except KeyboardInterrupt:
        return


# -- replay ----------------------------------------------------------------------------


def _plan_table(plan: ResetPlan, title: str, labels: tuple[str, str] = ("current", "new")) -> Table:
    table = Table("topic", "partition", *labels, "change", "earliest", "latest", title=title)
    for r in plan.rows:
        change = "kept" if r.kept else "-" if r.before is None else f"{r.after - r.before:+d}"
        table.add_row(
            r.topic,
            str(r.partition),
            common.opt(r.before),
            str(r.after),
            change,
            str(r.earliest),
            str(r.latest),
        )
    return table


def _plan_json(plan: ResetPlan, applied: bool) -> dict[str, Any]:
    return {
        "group": plan.group,
        "target_group": plan.target_group,
        "target": plan.target.describe(),
        "applied": applied,
        "partitions": [
            {
                "topic": r.topic,
                "partition": r.partition,
                "before": r.before,
                "after": r.after,
                "kept": r.kept,
                "rerun": r.rerun,
                "skips": r.skips,
            }
            for r in plan.rows
        ],
    }


def _reset_line(after: ResetPlan, group: str) -> str:
    """The line after a reset: how many partitions moved, how many stayed at their offset (their
    commit metadata kept), and for a new group how many it took from ``group`` as they are."""
    kept = sum(r.kept for r in after.rows)
    named = [r for r in after.rows if not r.kept]
    moved = sum(r.before != r.after for r in named)
    line = f"moved {moved} partition(s) of {after.target_group}"
    if (stayed := len(named) - moved) and after.target_group == group:
        line += f"; {stayed} already at the offset asked for, left as they were with their commit metadata"
    elif stayed:  # a new group's: written at the group's offset
        line += f"; {stayed} at {group}'s offset, the one asked for, with its commit metadata"
    if kept:
        line += f"; gave it {group}'s offsets of {kept} more, as they are"
    return line


def _skip_line(plan: ResetPlan) -> str | None:
    """One line counting the records a move forward skips that the group had not finished
    (its commit metadata did not name them), or None when there are none."""
    rows = [r for r in plan.rows if r.skips]
    if not rows:
        return None
    each = ", ".join(f"{r.topic}:{r.partition} {r.skips}" for r in rows)
    # offsets, not records: a transaction's marker or a compacted record takes one too
    n = sum(r.skips for r in rows)
    if plan.target_group == plan.group:
        return (
            f"up to {n} record(s) between the committed and the new offsets that the group had not "
            f"finished will never run ({each})"
        )
    return (
        f"up to {n} record(s) between {plan.group}'s committed offsets and the new ones, which "
        f"{plan.group} had not finished, will not run in {plan.target_group} ({each})"
    )


def _rerun_line(plan: ResetPlan) -> str | None:
    """One line counting the records the group had finished beyond its offsets that the reset
    makes run again (its commit metadata named them), or None when there are none."""
    rows = [r for r in plan.rows if r.rerun]
    if not rows:
        return None
    each = ", ".join(f"{r.topic}:{r.partition} {r.rerun}" for r in rows)
    return (
        f"{sum(r.rerun for r in rows)} record(s) the group had finished beyond its committed offsets "
        f"will run again from the new offsets ({each}): the commit metadata that named them is not written"
    )


@with_client_config
@common.tool_errors
def replay(
    group: Annotated[str, typer.Argument(help="consumer group id")],
    to_time: Annotated[
        str | None,
        typer.Option(help="first record at or after this ISO-8601 time (UTC unless a zone is given)"),
    ] = None,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="the oldest retained record")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="the end (skip everything)")] = False,
    to_offset: Annotated[
        list[str] | None,
        typer.Option(help="PARTITION:OFFSET or TOPIC:PARTITION:OFFSET; repeatable, a partition once"),
    ] = None,
    shift: Annotated[int | None, typer.Option(help="move by N records (negative: replay N back)")] = None,
    topic: Annotated[
        list[str] | None, typer.Option("--topic", "-t", help="only these topics (default: the group's)")
    ] = None,
    new_group: Annotated[
        str | None,
        typer.Option(
            help="write the offsets to this new group id instead (the group keeps running); "
            "a group that exists is refused"
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan, change nothing")] = False,
    bootstrap: Bootstrap = None,
    json: Json = False,
) -> None:
    """Reset a consumer group's offsets to replay (or skip) records.

    Refused while the group has live members, unless --new-group names a new group id. A
    --new-group that exists (live members, or committed offsets) is refused too; to move that
    group's own offsets, give it as GROUP.

    A group with no offsets yet may take them ahead of its first start: name the topic with
    --topic, or in --to-offset TOPIC:PARTITION:OFFSET.

    An offset (--to-offset, --shift) past a partition's end offset moves to the end, and one
    before its earliest retained record to that record, each with a warning on stderr.

    --dry-run prints the plan; a real run prints before and after.

    Example: laneway replay orders-service --to-time 2026-11-20T10:00 --dry-run
    """
    _group_given(group)
    chosen = [
        x for x in (to_time is not None, to_earliest, to_latest, bool(to_offset), shift is not None) if x
    ]
    if len(chosen) != 1:
        raise common.fail("give exactly one of --to-time, --to-earliest, --to-latest, --to-offset, --shift")
    if topic and (again := next((t for i, t in enumerate(topic) if t in topic[:i]), None)):
        raise common.fail(f"--topic {again} is given twice: give each topic once")  # its rows came twice
    if to_time is not None:
        target = ResetTarget.at_time(parse_time(to_time))
    elif to_earliest:
        target = ResetTarget.earliest()
    elif to_latest:
        target = ResetTarget.latest()
    elif to_offset:
        target = ResetTarget.to_offsets(parse_partition_offsets(to_offset))
    else:
        target = ResetTarget.by(shift or 0)
    _, admin = common.connect(bootstrap)
    plan = plan_reset(admin, group, target, topics=topic or (), new_group=new_group)
    for row in plan.rows:  # an offset past the end: a likely typo, which would replay nothing there
        if warning := row.out_of_range():
            typer.secho(f"warning: {warning}", err=True, fg=typer.colors.YELLOW)
    where = plan.target_group if plan.target_group == group else f"{plan.target_group} (from {group})"
    if dry_run:
        if members := group_state(admin, plan.target_group).members:  # the real run would be refused
            typer.secho(
                f"warning: group {plan.target_group!r} has {members} live member(s): the real run is "
                "refused until they stop (or reset a new group id with --new-group)",
                err=True,
                fg=typer.colors.YELLOW,
            )
        if json:
            common.echo_json(_plan_json(plan, applied=False))
            return
        console = common.console()
        console.print(_plan_table(plan, f"plan for {where}: {target.describe()}"))
        for line in (_rerun_line(plan), _skip_line(plan)):
            if line:
                typer.echo(line)
        console.print("dry run: nothing changed")
        return
    check_no_live_members(admin, plan.target_group)  # refuse before printing a "before" picture
    if not json:
        common.console().print(_plan_table(plan, f"before: {where}, to move {target.describe()}"))
    done = apply_reset(admin, plan)
    now = group_state(admin, plan.target_group).committed
    after = ResetPlan(
        done.group,
        done.target_group,
        done.target,
        tuple(replace(r, after=now.get((r.topic, r.partition), r.after)) for r in done.rows),
    )
    if json:
        common.echo_json(_plan_json(after, applied=True))
        return
    common.console().print(_plan_table(after, f"after: {where}", labels=("before", "after")))
    typer.echo(_reset_line(after, group))
    for line in (_rerun_line(after), _skip_line(after)):
        if line:
            typer.echo(line)
