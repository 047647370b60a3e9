"""Time GET /v1/admin/digest over 100,000 and 10,000,000 messages, and measure disk per message.

    .venv/bin/python loadtest/digest_bench.py --sizes 100000,10000000 --scratch /tmp/digest-bench

A scratch PostgreSQL (embedded, under --scratch, unless --database-url names one that may
be filled) and Redis are started. Messages are generated as they would have arrived: in
bounded INSERT … SELECT generate_series chunks in created_at order over the last 30
days (10 projects, 4 channels, the final statuses of a healthy system, each with
content, 4% with an event), through the real rollup trigger, with the deltas folded
and old hours compacted after each chunk as beat does. Then a backlog of 0.1% of the
size is added as the newest rows (accepted and ready, created in the last 5 minutes:
waiting messages are recent ones), the tables are vacuumed and analyzed as autovacuum
would, and the endpoint is called in-process (Flask test client: application and
database time, no network). Figures are printed as Markdown tables.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from app.api import create_app
from app.config import Settings
from app.observability.rollup import compact, fold
from app.runtime import migrate
from app.runtime.embedded import EmbeddedRedis, start_postgres

ADMIN_KEY = "bench-admin-key-0123456789"
CHUNK = 250_000
PROJECTS = 10

FILL = """
WITH new AS (
    INSERT INTO messages (project_id, channel, status, priority, provider, to_address, attempts,
                          created_at, updated_at, ready_at, claimed_at, sent_at)
    SELECT 'bench-' || (g % :projects),
           CASE WHEN r1 < 0.70 THEN 'email' WHEN r1 < 0.90 THEN 'sms' WHEN r1 < 0.98 THEN 'push' ELSE 'webhook' END,
           CASE WHEN r2 < 0.900 THEN 'sent' WHEN r2 < 0.930 THEN 'delivered' WHEN r2 < 0.950 THEN 'failed'
                WHEN r2 < 0.960 THEN 'dead' WHEN r2 < 0.975 THEN 'skipped' WHEN r2 < 0.990 THEN 'suppressed'
                ELSE 'cancelled' END,
           CASE WHEN g % 5 = 0 THEN 'transactional' ELSE 'bulk' END,
           'log', 'user' || g || '@example.com', 1, at, at, at, at, at
    FROM (SELECT g, random() AS r1, random() AS r2,
                 now() - interval '30 days' + (g - 1 + random()) * (interval '30 days' - interval '5 minutes') / :total
                     AS at
          FROM generate_series(:start, :stop) AS g) AS s
    ORDER BY at
    RETURNING id, project_id, status, created_at
), contents AS (
    INSERT INTO message_contents (message_id, subject, text, metadata)
    SELECT id, 'Your order has shipped', repeat('Your parcel is on its way. ', 8), '{"order": "A-17"}'
    FROM new
)
INSERT INTO events (message_id, project_id, type, at, data)
SELECT id, project_id, 'failed', created_at, '{"attempt": 1, "reason": "HTTP 503"}'
FROM new WHERE status IN ('failed', 'dead', 'skipped', 'suppressed') AND random() < 0.6
"""

# The backlog: newest rows, waiting for prepare (accepted) or for their provider (ready).
BACKLOG = """
INSERT INTO messages (project_id, channel, status, priority, provider, to_address, created_at, updated_at)
SELECT 'bench-' || (g % :projects), 'email', CASE WHEN g % 2 = 0 THEN 'accepted' ELSE 'ready' END,
       CASE WHEN g % 5 = 0 THEN 'transactional' ELSE 'bulk' END, 'log', 'user' || g || '@example.com',
       now() - random() * interval '5 minutes', now()
FROM generate_series(1, :count) AS g
"""

SIZES = """
SELECT count(*) AS messages,
       pg_total_relation_size('messages') AS messages_bytes,
       pg_total_relation_size('message_contents') AS contents_bytes,
       pg_total_relation_size('events') AS events_bytes,
       pg_total_relation_size('message_counts') + pg_total_relation_size('message_count_deltas') AS rollup_bytes,
       (SELECT count(*) FROM message_counts) AS rollup_rows
FROM messages
"""


def reset(engine, database_url: str) -> None:
    """An empty, migrated schema with the bench's projects."""
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    migrate.upgrade(database_url)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO projects (id, name, channels) SELECT 'bench-' || g, 'Bench', ARRAY['email'] "
                "FROM generate_series(0, :n - 1) AS g"
            ),
            {"n": PROJECTS},
        )


def fill(engine, total: int) -> None:
    """`total` finished messages spread in order over 30 days, with beat's folding kept up."""
    for start in range(1, total + 1, CHUNK):
        stop = min(start + CHUNK - 1, total)
        began = time.monotonic()
        with engine.begin() as connection:
            connection.execute(text(FILL), {"start": start, "stop": stop, "projects": PROJECTS, "total": total})
        with engine.begin() as connection:
            while fold(connection, batch=50_000):
                pass
            compact(connection)
        print(f"  inserted {stop:,} ({time.monotonic() - began:.1f}s for the chunk)", flush=True)


def settle(engine, backlog: int) -> None:
    """Add the backlog, fold its deltas, then vacuum and analyze as autovacuum would."""
    with engine.begin() as connection:
        connection.execute(text(BACKLOG), {"count": backlog, "projects": PROJECTS})
        while fold(connection, batch=50_000):
            pass
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        for table in ("messages", "message_contents", "events", "message_counts", "message_count_deltas"):
            connection.execute(text(f"VACUUM ANALYZE {table}"))


def time_calls(client, query: str, repeat: int) -> list[float]:
    timings = []
    for _ in range(repeat):
        began = time.perf_counter()
        answer = client.get(f"/v1/admin/digest{query}", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        timings.append((time.perf_counter() - began) * 1000)
        assert answer.status_code == 200, answer.get_json()
    return timings


def direct_count_ms(engine) -> float:
    began = time.perf_counter()
    with engine.connect() as connection:
        connection.execute(text("SELECT project_id, channel, status, count(*) FROM messages GROUP BY 1, 2, 3")).all()
    return (time.perf_counter() - began) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,10000000", help="Comma-separated message counts.")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/tidings-digest-bench"))
    parser.add_argument("--database-url", help="A scratch database to fill (default: embedded, under --scratch).")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    assert max(sizes) <= 20_000_000, "at most 20 million messages"

    postgres = None
    if args.database_url is None:
        postgres = start_postgres(args.scratch / "pg")
    redis_server = EmbeddedRedis().start()
    try:
        database_url = args.database_url or postgres.get_uri()
        settings = Settings.from_env(
            {
                "DATABASE_URL": database_url,
                "REDIS_URL": redis_server.url,
                "TIDINGS_ADMIN_KEY": ADMIN_KEY,
                "TIDINGS_SECRET_KEY": "bench-secret-key-0123456789",
            }
        )
        engine = create_engine(settings.database_url)
        client = create_app(settings).test_client()
        rows = []
        for size in sizes:
            print(f"a fresh database with {size:,} messages", flush=True)
            reset(engine, settings.database_url)
            fill(engine, size)
            settle(engine, backlog=size // 1000)
            with engine.connect() as connection:
                sizes_row = connection.execute(text(SIZES)).one()
            time_calls(client, "", 3)  # warm the caches and the connection pool
            figures = {
                "default (24 h)": time_calls(client, "", args.repeat),
                "since 31 days": time_calls(client, "?since=" + _days_ago(31), args.repeat),
                "one project, 31 days": time_calls(client, "?project=bench-3&since=" + _days_ago(31), args.repeat),
            }
            rows.append((size, figures, direct_count_ms(engine), sizes_row))
            print(f"  load average while timing: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        report(rows)
    finally:
        redis_server.stop()
        if postgres is not None:
            postgres.cleanup()


def _days_ago(days: int) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


def report(rows) -> None:
    print("\n| messages | query | p50 ms | p95 ms | max ms | direct GROUP BY ms |")
    print("|---:|---|---:|---:|---:|---:|")
    for size, figures, direct, _ in rows:
        for name, timings in figures.items():
            p95 = statistics.quantiles(timings, n=20, method="inclusive")[-1]
            print(
                f"| {size:,} | {name} | {statistics.median(timings):.1f} | {p95:.1f} | {max(timings):.1f} "
                f"| {direct:.0f} |"
            )
    print("\n| messages | messages table | contents | events | rollup (rows) | bytes per message, all |")
    print("|---:|---:|---:|---:|---:|---:|")
    for size, _, _, s in rows:
        total = s.messages_bytes + s.contents_bytes + s.events_bytes + s.rollup_bytes
        print(
            f"| {size:,} | {s.messages_bytes / s.messages:.0f} B | {s.contents_bytes / s.messages:.0f} B "
            f"| {s.events_bytes / s.messages:.0f} B | {s.rollup_bytes / 1e6:.1f} MB ({s.rollup_rows:,}) "
            f"| {total / s.messages:.0f} B |"
        )


if __name__ == "__main__":
    main()
