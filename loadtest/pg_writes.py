"""What PostgreSQL wrote per notification: row versions by table (pg_stat_user_tables), and WAL.

Every INSERT and every UPDATE writes a row version: an UPDATE that is not HOT also adds an
entry to each index whose predicate the new version meets, and leaves a dead version for
VACUUM. So the count of versions a notification costs, and how many of its updates were
HOT, say what a change to the pipeline's status transitions saved, beside the statements
(statements.py) and the CPU. The WAL's bytes, and how many whole pages it logged (the
first change to a page after a checkpoint logs all of it), say what each version and
index entry cost on top, in writes to disk and in CPU. Any PostgreSQL keeps
these counters, the embedded one too. Table counts reach the view a second or so after each
transaction (its statistics are flushed in intervals), which is nothing over minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session, sessionmaker

SHOWN = 0.01  # row versions per notification that put a table in the table
WAL = text("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, wal_fpi FROM pg_stat_wal")


@dataclass(frozen=True)
class Writes:
    """One table's row writes since the server's statistics began."""

    inserted: int
    updated: int
    hot: int  # of the updates, those that added no index entry
    deleted: int

    @property
    def versions(self) -> int:
        return self.inserted + self.updated

    def __sub__(self, other: Writes) -> Writes:
        return Writes(
            self.inserted - other.inserted,
            self.updated - other.updated,
            self.hot - other.hot,
            self.deleted - other.deleted,
        )

    def __add__(self, other: Writes) -> Writes:
        return Writes(
            self.inserted + other.inserted,
            self.updated + other.updated,
            self.hot + other.hot,
            self.deleted + other.deleted,
        )


NONE = Writes(0, 0, 0, 0)


@dataclass(frozen=True)
class Written:
    """What was written to each table, and the WAL: since the server began, or between two snapshots."""

    tables: Mapping[str, Writes]
    wal_bytes: int  # the whole server's, as WAL is
    full_pages: int


def wal(db: Session | Connection) -> tuple[int, int]:
    """The server's WAL written so far, in bytes, and the whole pages it logged."""
    written, full_pages = db.execute(WAL).one()
    return int(written), int(full_pages)


def snapshot(db: sessionmaker[Session]) -> Written:
    """This database's tables and what was written to each so far, and the server's WAL."""
    with db() as session:
        rows = session.execute(
            text("SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables")
        ).all()
        wal_bytes, full_pages = wal(session)
    tables = {name: Writes(int(ins), int(upd), int(hot), int(dele)) for name, ins, upd, hot, dele in rows}
    return Written(tables, wal_bytes, full_pages)


def since(before: Written, after: Written) -> Written:
    """What was written between two snapshots (of the tables, those written to only)."""
    tables = {name: now - before.tables.get(name, NONE) for name, now in after.tables.items()}
    return Written(
        {name: writes for name, writes in tables.items() if writes != NONE},
        after.wal_bytes - before.wal_bytes,
        after.full_pages - before.full_pages,
    )


def table(written: Written, notifications: int) -> list[str]:
    """A Markdown table, per notification, of the tables given at least SHOWN row versions
    a notification, most first, and all tables as the last row; then a line for the WAL."""
    if notifications <= 0:
        raise ValueError("figures per notification need at least one notification")
    ranked = sorted(written.tables.items(), key=lambda item: item[1].versions, reverse=True)
    shown = [(f"`{name}`", writes) for name, writes in ranked if writes.versions >= SHOWN * notifications]
    every = sum((writes for _, writes in ranked), NONE)
    lines = [
        "| table | row versions/notif. | inserted | updated | of them HOT | deleted |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, w in [*shown, (f"all {len(ranked)} tables", every)]:
        hot = f"{w.hot / w.updated:.0%}" if w.updated else "—"
        lines.append(
            f"| {label} | {w.versions / notifications:.2f} | {w.inserted / notifications:.2f} | "
            f"{w.updated / notifications:.2f} | {hot} | {w.deleted / notifications:.2f} |"
        )
    lines += [
        "",
        f"WAL: {written.wal_bytes / notifications:,.0f} bytes per notification, "
        f"{written.full_pages / notifications:.2f} whole pages logged (full-page images)",
    ]
    return lines
