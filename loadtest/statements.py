"""PostgreSQL's work per statement, from pg_stat_statements, as figures per notification.

The soak empties the server's statistics when its measured window starts, reads them at
the start of its second half and at the end, and prints the statements that took the most
time in between: how often each ran per notification, its time, the rows it returned or
wrote, and the shared buffers it touched. That says which statements a change to the
pipeline should remove or make cheaper, beside the per-process CPU that says how much.

Only a server that loads the extension (`shared_preload_libraries`) can give them; with any
other (the embedded pgserver wheel ships without it) the soak prints why, and goes on.
Statements differing only in the length of an `IN` or `VALUES` list are one shape here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

TOP = 10  # statements in the table, by total time
FREQUENT = 0.5  # calls per notification that put a statement in the table whatever its time
QUERY_WIDTH = 100  # characters of a statement's text shown
_PARAMETERS = re.compile(r"\$\d+(?:\s*,\s*\$\d+)*")
_ROWS = re.compile(r"\(\$…\)(?:\s*,\s*\(\$…\))+")


@dataclass(frozen=True)
class Statement:
    """One statement's totals since the statistics were last emptied."""

    query: str
    calls: int
    total_ms: float  # executing it, wall-clock (waits for locks and I/O count too)
    rows: int  # returned, or written by INSERT, UPDATE and DELETE
    blocks: int  # shared buffers hit plus read


def start(db: sessionmaker[Session]) -> str | None:
    """Empty the server's statement statistics: None when done, else why they cannot be had."""
    try:
        with db() as session:
            available = session.scalar(
                text("SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_stat_statements'")
            )
            if not available:
                return "PostgreSQL here has no pg_stat_statements extension: no per-statement figures"
            if "pg_stat_statements" not in session.scalar(text("SHOW shared_preload_libraries")):
                return "PostgreSQL here does not preload pg_stat_statements: no per-statement figures"
            session.execute(text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
            session.execute(text("SELECT pg_stat_statements_reset()"))
            session.commit()
    except DBAPIError as error:
        return f"pg_stat_statements unusable: {str(error.orig).strip().splitlines()[0]}"
    return None


def snapshot(db: sessionmaker[Session]) -> dict[int, Statement]:
    """This database's statements so far, by query id."""
    with db() as session:
        rows = session.execute(
            text(
                "SELECT queryid, min(query), sum(calls), sum(total_exec_time), sum(rows),"
                " sum(shared_blks_hit + shared_blks_read)"
                " FROM pg_stat_statements"
                " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " GROUP BY queryid"
            )
        ).all()
    return {
        queryid: Statement(query, int(calls), float(ms), int(n), int(blocks))
        for queryid, query, calls, ms, n, blocks in rows
    }


def shape(query: str) -> str:
    """The statement's text on one line, with lists of parameters (`IN ($1, $2)`, `VALUES ($1,
    $2), ($3, $4)`) of any length written the same way."""
    flat = " ".join(query.split())
    return _ROWS.sub("($…), …", _PARAMETERS.sub("$…", flat))


def since(before: Mapping[int, Statement], after: Mapping[int, Statement]) -> list[Statement]:
    """What each statement shape did between two snapshots."""
    shapes: dict[str, Statement] = {}
    for queryid, now in after.items():
        then = before.get(queryid, Statement(now.query, 0, 0.0, 0, 0))
        key = shape(now.query)
        seen = shapes.get(key, Statement(key, 0, 0.0, 0, 0))
        shapes[key] = Statement(
            key,
            seen.calls + now.calls - then.calls,
            seen.total_ms + now.total_ms - then.total_ms,
            seen.rows + now.rows - then.rows,
            seen.blocks + now.blocks - then.blocks,
        )
    return [statement for statement in shapes.values() if statement.calls > 0]


def table(statements: Iterable[Statement], notifications: int, top: int = TOP) -> list[str]:
    """A Markdown table, per notification, of the `top` statements by total time and those
    run at least FREQUENT times a notification (cheap ones, BEGIN and COMMIT among them,
    that a change may remove all the same), by time; all of them as the last row."""
    if notifications <= 0:
        raise ValueError("figures per notification need at least one notification")
    ranked = sorted(statements, key=lambda s: s.total_ms, reverse=True)
    shown = [s for n, s in enumerate(ranked) if n < top or s.calls >= FREQUENT * notifications]
    every = Statement(
        "",
        sum(s.calls for s in ranked),
        sum(s.total_ms for s in ranked),
        sum(s.rows for s in ranked),
        sum(s.blocks for s in ranked),
    )
    lines = [
        "| statement | calls/notif. | total ms | ms/notif. | mean ms | rows/notif. | shared blocks hit+read/notif. |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [(f"`{_shortened(s.query)}`", s) for s in shown] + [(f"all {len(ranked)} statements", every)]
    for label, s in rows:
        lines.append(
            f"| {label} | {s.calls / notifications:.3f} | {s.total_ms:,.0f} | "
            f"{s.total_ms / notifications:.3f} | {s.total_ms / max(s.calls, 1):.3f} | "
            f"{s.rows / notifications:.2f} | {s.blocks / notifications:.1f} |"
        )
    return lines


def _shortened(query: str) -> str:
    """Fit for a Markdown table cell: at most QUERY_WIDTH characters, pipes escaped."""
    cut = query if len(query) <= QUERY_WIDTH else query[: QUERY_WIDTH - 1] + "…"
    return cut.replace("|", "\\|")
