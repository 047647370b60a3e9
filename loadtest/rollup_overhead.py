"""What the rollup trigger costs the pipeline's own statements.

    .venv/bin/python loadtest/rollup_overhead.py --scratch /tmp/rollup-overhead

On a scratch PostgreSQL (embedded under --scratch) with the real schema and 100,000
messages, runs the statements the pipeline issues per batch under EXPLAIN ANALYZE, which
reports the time spent in each trigger apart from the statement's own: a 10,000-row
INSERT (the batch API), a 500-row status UPDATE (deliver's finalise), a one-row INSERT
(one POST /v1/messages). Each run is rolled back, so every round sees the same table;
wall-clock A/B timings on a shared 2-core machine are noisier than the cost measured.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from sqlalchemy import create_engine, text

from app.runtime import migrate
from app.runtime.embedded import start_postgres

STATEMENTS = {
    "INSERT 10,000 rows (batch API)": """
        INSERT INTO messages (project_id, channel, status, priority, to_address)
        SELECT 'overhead', 'email', 'accepted', 'bulk', 'user' || g || '@example.com' FROM generate_series(1, 10000) g
    """,
    "UPDATE 500 rows (deliver's finalise)": """
        UPDATE messages SET status = 'sent', sent_at = now(), updated_at = now()
        WHERE id IN (SELECT id FROM messages WHERE status = 'sending' LIMIT 500)
    """,
    "INSERT 1 row (POST /v1/messages)": """
        INSERT INTO messages (project_id, channel, status, priority, to_address)
        VALUES ('overhead', 'email', 'accepted', 'transactional', 'ada@example.com')
    """,
}


def measure(connection, statement: str) -> tuple[float, float]:
    """The statement's execution time and the part of it the counting trigger took, in ms."""
    plan = connection.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + statement)).scalar()[0]
    trigger = sum(t["Time"] for t in plan.get("Triggers", []) if t["Trigger Name"].startswith("messages_count"))
    return plan["Execution Time"], trigger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/tidings-rollup-overhead"))
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    postgres = start_postgres(args.scratch / "pg")
    try:
        url = postgres.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
        engine = create_engine(url)
        with engine.begin() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        migrate.upgrade(url)
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO projects (id, name, channels) VALUES ('overhead', 'O', ARRAY['email'])")
            )
            connection.execute(
                text(
                    "INSERT INTO messages (project_id, channel, status, priority, created_at) "
                    "SELECT 'overhead', 'email', 'sending', 'bulk', now() - random() * interval '2 hours' "
                    "FROM generate_series(1, 100000)"
                )
            )
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text("VACUUM ANALYZE messages"))
        print("\n| statement | statement, median ms | of which the trigger, median ms | share |")
        print("|---|---:|---:|---:|")
        for name, statement in STATEMENTS.items():
            totals, triggers = [], []
            for _ in range(args.rounds):
                with engine.connect() as connection, connection.begin() as transaction:
                    total, trigger = measure(connection, statement)
                    transaction.rollback()
                totals.append(total)
                triggers.append(trigger)
            total, trigger = statistics.median(totals), statistics.median(triggers)
            print(f"| {name} | {total:.2f} | {trigger:.2f} | {trigger / total:.0%} |")
    finally:
        postgres.cleanup()


if __name__ == "__main__":
    main()
