"""What the rollup trigger costs the pipeline's own statements.

    .venv/bin/python loadtest/rollup_overhead.py --scratch /tmp/rollup-overhead

On a scratch PostgreSQL (embedded under --scratch) with the real schema, times the
statements the pipeline runs per batch, with the counting triggers enabled and disabled
in turn: a 10,000-row INSERT (the batch API), a 500-row status UPDATE (deliver's
finalise), a single-row INSERT (one POST /v1/messages). Rounds alternate so load from
other processes falls on both sides alike; medians are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from app import migrate
from app.embedded import start_postgres

TRIGGERS = ("messages_count_insert", "messages_count_update", "messages_count_delete")

INSERT = """
    INSERT INTO messages (project_id, channel, status, priority, to_address)
    SELECT 'overhead', 'email', 'accepted', 'bulk', 'user' || g || '@example.com' FROM generate_series(1, :n) AS g
    RETURNING id::text
"""
FINALISE = """
    UPDATE messages m SET status = 'sent', sent_at = now(), updated_at = now()
    FROM unnest(CAST(:ids AS uuid[])) AS v(id) WHERE m.id = v.id
"""


def timed(engine, statement: str, params: dict) -> tuple[float, list[str]]:
    """Milliseconds for the statement alone (its transaction's commit excluded), and its ids."""
    with engine.begin() as connection:
        began = time.perf_counter()
        result = connection.execute(text(statement), params)
        ids = list(result.scalars()) if result.returns_rows else []
        return (time.perf_counter() - began) * 1000, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/tidings-rollup-overhead"))
    parser.add_argument("--rounds", type=int, default=15)
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
        figures: dict[tuple[str, bool], list[float]] = {}
        for _ in range(args.rounds):
            for enabled in (True, False):
                with engine.begin() as connection:
                    verb = "ENABLE" if enabled else "DISABLE"
                    for trigger in TRIGGERS:
                        connection.execute(text(f"ALTER TABLE messages {verb} TRIGGER {trigger}"))
                ms, ids = timed(engine, INSERT, {"n": 10_000})
                figures.setdefault(("INSERT 10,000 rows", enabled), []).append(ms)
                ms, _ = timed(engine, FINALISE, {"ids": ids[:500]})
                figures.setdefault(("UPDATE 500 rows (finalise)", enabled), []).append(ms)
                ms, _ = timed(engine, INSERT, {"n": 1})
                figures.setdefault(("INSERT 1 row", enabled), []).append(ms)
        print("\n| statement | with triggers, median ms | without, median ms |")
        print("|---|---:|---:|")
        for name in ("INSERT 10,000 rows", "UPDATE 500 rows (finalise)", "INSERT 1 row"):
            with_ms, without_ms = (statistics.median(figures[(name, flag)]) for flag in (True, False))
            print(f"| {name} | {with_ms:.2f} | {without_ms:.2f} |")
    finally:
        postgres.cleanup()


if __name__ == "__main__":
    main()
