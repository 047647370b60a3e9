"""A single send's primary keys: random ids against time-ordered ones, in a table of many messages.

    python loadtest/insert_ids.py [--rows 1000000] [--inserts 3000] [--rounds 3]

A single send writes one message and its content row, each keyed by the message's id. A
random (version 4) id lands on a random leaf page of both primary keys, and the first
change to a page after a checkpoint writes all of that page to the WAL; a time-ordered
(version 7) id, as every send gets now (app/services/intake.py), lands on the right edge,
where the sends of the moment share one page. So this fills a project with `--rows`
messages and their contents (random ids, as a table written before the change has), then
times rounds of `--inserts` sends of each kind, one transaction each, every round after a
CHECKPOINT: WAL bytes and full-page images per send, from the server's own counters (the
figures to compare, which a busy neighbour does not change), and wall time per send.
Against DATABASE_URL when set, an embedded PostgreSQL otherwise; the project and its rows
are removed at the end. Figures go to stdout and, unless --no-append, BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from statistics import median

from harness import servers
from pg_writes import wal
from report import append_section
from sqlalchemy import Connection, create_engine

from app.runtime import migrate
from app.services.intake import new_message_ids

FILL = """
    WITH new AS (
        INSERT INTO messages (project_id, channel, status, priority, subscriber_id, to_address)
        SELECT %(project)s, 'email', 'sent', 'transactional', 'sub-' || (n %% 100000), 'ada@example.com'
        FROM generate_series(1, %(rows)s) AS n
        RETURNING id
    )
    INSERT INTO message_contents (message_id, subject) SELECT id, 'Your order' FROM new
"""
# One message and its content, as a single send writes them.
SEND = """
    WITH new AS (
        INSERT INTO messages (id, project_id, channel, status, priority, subscriber_id, to_address)
        VALUES (%(id)s, %(project)s, 'email', 'accepted', 'transactional', %(subscriber)s, 'ada@example.com')
        RETURNING id
    )
    INSERT INTO message_contents (message_id, subject, data) SELECT id, 'Your order', '{"ref": "A-1"}' FROM new
"""
KINDS: dict[str, Callable[[], str]] = {
    "random (v4)": lambda: str(uuid.uuid4()),
    "time-ordered (v7)": lambda: new_message_ids(1)[0],
}


def round_of(
    connection: Connection, project: str, new_id: Callable[[], str], inserts: int
) -> tuple[float, float, float]:
    """WAL bytes, full-page images and wall milliseconds per send, over `inserts` sends after a checkpoint."""
    connection.exec_driver_sql("CHECKPOINT")
    wal_before, pages_before = wal(connection)
    started = time.perf_counter()
    for n in range(inserts):
        connection.exec_driver_sql(SEND, {"id": new_id(), "project": project, "subscriber": f"sub-{n}"})
    elapsed = time.perf_counter() - started
    wal_after, pages_after = wal(connection)
    return (wal_after - wal_before) / inserts, (pages_after - pages_before) / inserts, elapsed * 1000 / inserts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="messages in the table before the sends")
    parser.add_argument("--inserts", type=int, default=3000, help="sends per round and kind of id")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each timing both kinds")
    parser.add_argument("--no-append", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    if not (1_000 <= args.rows <= 10_000_000 and 100 <= args.inserts <= 100_000 and 1 <= args.rounds <= 20):
        parser.error("need 1,000 <= rows <= 10,000,000, 100 <= inserts <= 100,000 and 1 <= rounds <= 20")
    project = f"insert-ids-{uuid.uuid4().hex[:8]}"
    figures: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in KINDS}
    with servers() as urls:
        migrate.upgrade(urls["DATABASE_URL"])
        # Every send its own transaction, and CHECKPOINT and VACUUM outside one.
        engine = create_engine(urls["DATABASE_URL"], isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            sql = connection.exec_driver_sql
            sql("INSERT INTO projects (id, name, channels) VALUES (%(p)s, 'Insert ids', '{email}')", {"p": project})
            try:
                print(f"filling {args.rows:,} messages …", flush=True)
                sql(FILL, {"project": project, "rows": args.rows})
                sql("VACUUM ANALYZE messages, message_contents")
                for _ in range(args.rounds):
                    for kind, new_id in KINDS.items():
                        figures[kind].append(round_of(connection, project, new_id, args.inserts))
            finally:
                sql("DELETE FROM projects WHERE id = %(p)s", {"p": project})  # its messages go with it
        engine.dispose()
    lines = [
        f"{args.inserts:,} single sends per round and kind, {args.rounds} rounds, each after a CHECKPOINT, "
        f"into a project of {args.rows:,} messages",
        "",
        "| ids | WAL bytes per send | full-page images per send | ms per send (wall) | WAL bytes, every round |",
        "|---|---:|---:|---:|---|",
    ]
    for kind, rounds in figures.items():
        wal, pages, ms = (median(r[i] for r in rounds) for i in range(3))
        every = ", ".join(f"{r[0]:,.0f}" for r in rounds)
        lines.append(f"| {kind} | {wal:,.0f} | {pages:.2f} | {ms:.3f} | {every} |")
    body = "\n".join(lines)
    print(body)
    if not args.no_append:
        append_section("Single sends' ids: random against time-ordered", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
