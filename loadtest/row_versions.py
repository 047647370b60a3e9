"""Row versions PostgreSQL wrote per notification, by table, from pg_stat_user_tables.

Every INSERT and every UPDATE writes a row version: an UPDATE that is not HOT also adds an
entry to each index whose predicate the new version meets, and leaves a dead version for
VACUUM. So the count of versions a notification costs, and how many of its updates were
HOT, say what a change to the pipeline's status transitions saved, beside the statements
(statements.py) and the CPU. Any PostgreSQL keeps these counters, the embedded one too.
They reach the view a second or so after each transaction (its statistics are flushed in
intervals), which is nothing over a window of minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

SHOWN = 0.01  # row versions per notification that put a table in the table


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


def snapshot(db: sessionmaker[Session]) -> dict[str, Writes]:
    """This database's tables and what was written to each so far."""
    with db() as session:
        rows = session.execute(
            text("SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables")
        ).all()
    return {name: Writes(int(ins), int(upd), int(hot), int(dele)) for name, ins, upd, hot, dele in rows}


def since(before: Mapping[str, Writes], after: Mapping[str, Writes]) -> dict[str, Writes]:
    """What was written to each table between two snapshots (tables written to only)."""
    written = {name: now - before.get(name, NONE) for name, now in after.items()}
    return {name: writes for name, writes in written.items() if writes != NONE}


def table(written: Mapping[str, Writes], notifications: int) -> list[str]:
    """A Markdown table, per notification, of the tables given at least SHOWN row versions
    a notification, most first; all tables as the last row."""
    if notifications <= 0:
        raise ValueError("figures per notification need at least one notification")
    ranked = sorted(written.items(), key=lambda item: item[1].versions, reverse=True)
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
    return lines
