"""Delivery-log query times on a generated table of 10 million events.

    python loadtest/events_bench.py [--events 10000000] [--messages 4000000] [--data-dir DIR]
    python loadtest/events_bench.py --report-only --data-dir DIR     # query it again

Makes a scratch database (`tidings_events_bench`, dropped first) on DATABASE_URL's server,
or on an embedded PostgreSQL in --data-dir (kept) or a temporary directory (removed) when
DATABASE_URL is unset; migrates it; fills `messages` and `events` with INSERT … SELECT generate_series (one big
project with 90% of the rows, nine small ones; subscribers with ~20 messages; batches of
10,000; `sent_at` shared by runs of 100 messages, as finalise stamps a batch); then runs
EXPLAIN (ANALYZE, BUFFERS) on the exact statements `GET /v1/events` and the message
timeline use (app.services.events.log_sql) and prints the figures, plus the size of the
indexes this log adds per message.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, make_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.runtime import migrate
from app.services.events import LogQuery, log_sql

BIG, DB = "bench-big", "tidings_events_bench"
RUNS = 5

GENERATE_MESSAGES = """
INSERT INTO messages (id, project_id, channel, status, priority, subscriber_id, batch_id, provider,
                      provider_message_id, created_at, updated_at, ready_at, claimed_at, sent_at, attempts)
SELECT md5('m' || g)::uuid,
       CASE WHEN g % 10 = 0 THEN 'bench-small-' || (g / 10 % 9) ELSE :big END,
       'email', 'sent', CASE WHEN g % 2 = 0 THEN 'bulk' ELSE 'transactional' END,
       'u' || (g % (:messages / 20)),
       CASE WHEN g % 2 = 0 THEN md5('b' || (g / 20000))::uuid END,
       'fake', 'p-' || g,
       :start + g * :step, :start + g * :step, :start + g * :step, :start + g * :step,
       CASE WHEN g % 20 <> 0 THEN :start + (g / 100 * 100) * :step + interval '2 seconds' END, 1
FROM generate_series(1, :messages) AS g
"""

# Types in roughly the shares a busy project sees; data only where the type carries some.
GENERATE_EVENTS = """
INSERT INTO events (message_id, project_id, type, at, data)
SELECT md5('m' || n)::uuid,
       CASE WHEN n % 10 = 0 THEN 'bench-small-' || (n / 10 % 9) ELSE :big END,
       t.type,
       :start + n * :step + make_interval(secs => 5 + g % 3600),
       CASE t.type WHEN 'clicked' THEN jsonb_build_object('url', 'https://example.com/p/' || g % 1000)
                   WHEN 'failed' THEN '{"reason": "mailbox unavailable"}'::jsonb
                   ELSE '{}'::jsonb END
FROM generate_series(1, :events) AS g
CROSS JOIN LATERAL (SELECT 1 + (g::bigint * 7919) % :messages AS n) AS pick
CROSS JOIN LATERAL (SELECT CASE
        WHEN g % 1000 < 450 THEN 'delivered' WHEN g % 1000 < 700 THEN 'opened'
        WHEN g % 1000 < 800 THEN 'clicked' WHEN g % 1000 < 880 THEN 'retrying'
        WHEN g % 1000 < 930 THEN 'failed' WHEN g % 1000 < 960 THEN 'bounced'
        WHEN g % 1000 < 980 THEN 'skipped' WHEN g % 1000 < 995 THEN 'suppressed'
        WHEN g % 1000 < 999 THEN 'unsubscribed' ELSE 'complained' END AS type) AS t
"""


def scratch_url(base: str) -> str:
    server = create_engine(make_url(base).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with server.connect() as connection:
        connection.execute(text(f"DROP DATABASE IF EXISTS {DB}"))
        connection.execute(text(f"CREATE DATABASE {DB}"))
    server.dispose()
    return make_url(base).set(database=DB).render_as_string(hide_password=False)


def timed(label: str, connection: Connection, sql: str, **params: object) -> None:
    started = time.monotonic()
    connection.execute(text(sql), params)
    print(f"  {label}: {time.monotonic() - started:.0f} s", flush=True)


INDEXES = """
SELECT indexname, indexdef FROM pg_indexes
WHERE tablename IN ('messages', 'events')
  AND indexname NOT IN (SELECT conname FROM pg_constraint)  -- those back a key: kept
"""


def generate(url: str, messages: int, events: int) -> None:
    """Fill the tables with their secondary indexes dropped, then build those (the same
    definitions the migrations made): a sorted build is far quicker than 10M inserts into them."""
    start = datetime(2026, 1, 1)
    step = timedelta(days=30) / messages
    params = {"big": BIG, "messages": messages, "events": events, "start": start, "step": step}
    engine = create_engine(url)
    with engine.begin() as connection:
        indexes = connection.execute(text(INDEXES)).all()
        for name, _ in indexes:
            connection.execute(text(f"DROP INDEX {name}"))
        # The generated rows are consistent by construction; skip the per-row FK triggers.
        connection.execute(text("SET session_replication_role = replica"))
        connection.execute(
            text(
                "INSERT INTO projects (id, name, channels) SELECT p, p, ARRAY['email'] FROM "
                "unnest(ARRAY[:big] || ARRAY(SELECT 'bench-small-' || i FROM generate_series(0, 8) i)) p"
            ),
            {"big": BIG},
        )
        timed(f"{messages:,} messages", connection, GENERATE_MESSAGES, **params)
        timed(f"{events:,} events", connection, GENERATE_EVENTS, **params)
        connection.execute(text("SET maintenance_work_mem = '512MB'"))
        started = time.monotonic()
        for _, definition in indexes:
            connection.execute(text(definition))
        print(f"  {len(indexes)} indexes: {time.monotonic() - started:.0f} s", flush=True)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        timed("VACUUM ANALYZE", connection, "VACUUM ANALYZE")
    engine.dispose()


def explain(connection: Connection, sql: str, params: dict) -> tuple[float, str]:
    """Execution time (ms) of the best of RUNS, and the plan's first line."""
    times, plan = [], ""
    for _ in range(RUNS):
        rows = connection.execute(text("EXPLAIN (ANALYZE, BUFFERS) " + sql), params).scalars().all()
        times.append(float(next(r for r in rows if r.startswith("Execution Time")).split()[2]))
        plan = rows[0]
    return statistics.median(times), plan


def sample(connection: Connection, sql: str) -> object:
    return connection.execute(text(sql)).scalar()


def cases(connection: Connection) -> list[tuple[str, str, dict]]:
    subscriber = sample(
        connection, f"SELECT subscriber_id FROM messages WHERE project_id = '{BIG}' LIMIT 1 OFFSET 5000"
    )
    batch = sample(
        connection,
        f"SELECT batch_id::text FROM messages WHERE project_id = '{BIG}' AND batch_id IS NOT NULL "
        "LIMIT 1 OFFSET 900000",
    )
    message = sample(
        connection, f"SELECT message_id::text FROM events WHERE project_id = '{BIG}' LIMIT 1 OFFSET 123456"
    )
    newest = sample(connection, f"SELECT max(at) FROM events WHERE project_id = '{BIG}'")
    middle = newest - timedelta(days=15)
    listed = [
        ("newest page, no filter", LogQuery(BIG)),
        ("a page 15 days back (cursor)", LogQuery(BIG, after=(middle, "evt_"))),
        ("type=complained (0.1%)", LogQuery(BIG, types=("complained",))),
        ("type=delivered (45%)", LogQuery(BIG, types=("delivered",))),
        ("type=sent (derived)", LogQuery(BIG, types=("sent",))),
        ("type=failed,bounced", LogQuery(BIG, types=("failed", "bounced"))),
        (
            "one hour, 10 days back",
            LogQuery(BIG, since=newest - timedelta(days=10, hours=1), until=newest - timedelta(days=10)),
        ),
        ("subscriber (~20 messages)", LogQuery(BIG, subscriber_id=subscriber)),
        ("batch (10,000 messages)", LogQuery(BIG, batch_id=batch)),
        ("message", LogQuery(BIG, message_id=message)),
        ("small project, newest page", LogQuery("bench-small-3")),
        ("stream resume: 1 min replay", LogQuery(BIG, after=(newest - timedelta(minutes=1), ""), newest_first=False)),
    ]
    found = [(label, *log_sql(query, 51)) for label, query in listed]
    timeline = "SELECT * FROM events WHERE message_id = CAST(:id AS uuid) ORDER BY at, id"
    found.append(("message timeline (GET /v1/messages/{id})", timeline, {"id": message}))
    return found


SIZES = """
SELECT c.relname, pg_relation_size(c.oid) AS bytes FROM pg_class c
WHERE c.relname IN ('events', 'messages', 'ix_events_project_type_at', 'ix_events_project_at',
                    'ix_events_message_at', 'ix_messages_project_sent', 'ix_messages_batch')
ORDER BY c.relname
"""


def report(url: str) -> None:
    engine = create_engine(url)
    with engine.connect() as connection:
        counts = connection.execute(text("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM messages)")).one()
        print(f"\n{counts[0]:,} events, {counts[1]:,} messages; median of {RUNS} runs, page of 50\n")
        print(f"{'query':<44} {'ms':>9}  plan")
        for label, sql, params in cases(connection):
            ms, plan = explain(connection, sql, params)
            print(f"{label:<44} {ms:>9.2f}  {plan[:60]}")
        sent = connection.execute(text("SELECT count(*) FROM messages WHERE sent_at IS NOT NULL")).scalar()
        batched = connection.execute(text("SELECT count(*) FROM messages WHERE batch_id IS NOT NULL")).scalar()
        print("\nrelation sizes")
        for name, size in connection.execute(text(SIZES)):
            per = {"ix_messages_project_sent": sent, "ix_messages_batch": batched}.get(name)
            extra = f"  ({size / per:.1f} bytes per indexed message)" if per else ""
            print(f"  {name:<28} {size / 2**20:>9.1f} MiB{extra}")
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--messages", type=int, default=4_000_000)
    parser.add_argument("--data-dir", type=Path, help="keep the embedded server's data here")
    parser.add_argument("--report-only", action="store_true", help="query an already generated database")
    args = parser.parse_args()
    base = os.environ.get("DATABASE_URL")
    server = None
    if not base:
        from app.runtime.embedded import start_postgres

        server = start_postgres(args.data_dir or Path(tempfile.mkdtemp(prefix="events-bench-")))
        base = server.get_uri()
    base = base.replace("postgresql://", "postgresql+psycopg2://", 1) if base.startswith("postgresql://") else base
    url = make_url(base).set(database=DB).render_as_string(hide_password=False)
    if not args.report_only:
        url = scratch_url(base)
        migrate.upgrade(url)
        print("generating", flush=True)
        generate(url, args.messages, args.events)
    report(url)
    if server is not None:
        server.cleanup()
        if args.data_dir is None:
            shutil.rmtree(server.pgdata, ignore_errors=True)


if __name__ == "__main__":
    main()
