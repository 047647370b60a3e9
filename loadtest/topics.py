"""The topic fan-out benchmark: one send to a topic of a million followers, beside the batch
API's enqueue rate in the same run.

    python loadtest/topics.py [--members 1000000] [--batches 20] [--recipients 5000]

It starts the stack (the API under gunicorn, Celery workers, beat) as `make drain` does,
makes a project whose subscribers and topic membership are generated set-based in
PostgreSQL, then measures, one after the other:

- the batch API: `--batches` POSTs of `--recipients` addresses each, scheduled a day ahead;
- the fan-out: one POST with `"recipients": {"topic": …}`, scheduled a day ahead too, until
  the workers have written every member's message (the batch's `fanout_done_at`).

Both write the same rows (a message and its content per recipient) and neither delivers,
so the rates compare the ways in, not the provider. It then checks, against the
membership, that every member has exactly one message of the send, and reports the peak
RSS of the API and worker processes, which must not grow with the topic. Figures go to
stdout and, unless --no-append, BENCHMARKS.md. Against DATABASE_URL / REDIS_URL when set,
embedded servers otherwise; the project is deleted at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import requests
from drain import TEMPLATE, batch_bodies, enqueue, stack
from harness import bench_env, servers, use_run_settings
from peak_rss import PeakRss
from report import append_section
from sqlalchemy import Engine, create_engine, text

from app.config import Settings, database_url_from_env
from app.db import session_factory
from app.enums import KeyKind
from app.redis_client import redis_for
from app.runtime import migrate
from app.services import projects
from tasks.celery_app import configure
from tasks.fanout import MEMBERS_PER_TASK

TOPIC = "everyone"


def make_members(engine: Engine, project_id: str, members: int) -> float:
    """`members` subscribers, all following TOPIC, written set-based; the seconds it took."""
    started = time.perf_counter()
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO topics (project_id, key, name) VALUES (:p, :t, 'Everyone')"),
            {"p": project_id, "t": TOPIC},
        )
        connection.execute(
            text(
                """
                INSERT INTO subscribers (project_id, external_id, email)
                SELECT :p, 'm' || lpad(n::text, 8, '0'), 'm' || n || '@example.com' FROM generate_series(1, :n) AS n
                """
            ),
            {"p": project_id, "n": members},
        )
        connection.execute(
            text(
                """
                INSERT INTO topic_members (project_id, topic_key, subscriber_id)
                SELECT :p, :t, external_id FROM subscribers WHERE project_id = :p
                """
            ),
            {"p": project_id, "t": TOPIC},
        )
    return time.perf_counter() - started


def send_to_topic(api: str, key: str) -> tuple[str, int]:
    """POST the send to TOPIC, scheduled a day ahead; (batch id, accepted)."""
    body = {
        "channel": "email",
        "content": {"subject": "News", "text": "Something new on the board."},
        "scheduled_at": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
        "recipients": {"topic": TOPIC},
    }
    answer = requests.post(
        f"{api}/v1/messages/batch", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60
    )
    if answer.status_code != 202:
        raise RuntimeError(f"the batch API answered {answer.status_code}: {answer.text[:500]}")
    return answer.json()["batch_id"], answer.json()["accepted"]


def wait_fanned_out(engine: Engine, batch_id: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with engine.connect() as connection:
        while time.monotonic() < deadline:
            done = connection.execute(
                text("SELECT fanout_done_at IS NOT NULL FROM batches WHERE id = :b"), {"b": batch_id}
            ).scalar_one()
            connection.commit()
            if done:
                return
            time.sleep(0.2)
    raise RuntimeError(f"the fan-out of {batch_id} did not finish in {timeout:.0f} s")


def messages_per_member(engine: Engine, project_id: str, batch_id: str) -> dict[str, int]:
    """How many members have no message of the send, exactly one, more than one; and strays."""
    with engine.connect() as connection:
        row = connection.execute(
            text(
                """
                WITH sent AS (SELECT subscriber_id, count(*) AS n FROM messages WHERE batch_id = :b
                              GROUP BY subscriber_id)
                SELECT count(*) FILTER (WHERE sent.n IS NULL) AS none,
                       count(*) FILTER (WHERE sent.n = 1) AS once,
                       count(*) FILTER (WHERE sent.n > 1) AS more,
                       (SELECT count(*) FROM sent
                        WHERE subscriber_id NOT IN (SELECT subscriber_id FROM topic_members
                                                    WHERE project_id = :p AND topic_key = :t)) AS strays
                FROM topic_members tm LEFT JOIN sent ON sent.subscriber_id = tm.subscriber_id
                WHERE tm.project_id = :p AND tm.topic_key = :t
                """
            ),
            {"b": batch_id, "p": project_id, "t": TOPIC},
        ).one()
    return dict(row._mapping)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=1_000_000, help="followers of the topic")
    parser.add_argument("--batches", type=int, default=20, help="batch API requests beside it")
    parser.add_argument("--recipients", type=int, default=5000, help="recipients per batch request")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the fan-out may take")
    parser.add_argument("--no-append", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    if not (1 <= args.members <= 10_000_000 and 1 <= args.batches <= 1000 and 1 <= args.recipients <= 10_000):
        parser.error("need 1 <= members <= 10,000,000, 1 <= batches <= 1000, 1 <= recipients <= 10,000")
    with servers() as urls, tempfile.TemporaryDirectory(prefix="topics-") as scratch:
        directory = Path(scratch)
        use_run_settings(urls)
        database_url = database_url_from_env(urls)
        migrate.upgrade(database_url)
        engine = create_engine(database_url)
        db = session_factory(database_url)
        project_id = f"topics-{uuid.uuid4().hex[:8]}"
        projects.create_project(db, {"id": project_id, "name": "Topic fan-out", "channels": ["email"]})
        try:
            env = bench_env(urls, directory, EMAIL_PROVIDER="log", EMAIL_DAILY_QUOTA="none")
            configure(Settings.from_env(env))
            key = projects.create_key(db, project_id, "topics", KeyKind.LIVE)["key"]
            setup_seconds = make_members(engine, project_id, args.members)
            bodies = batch_bodies(args.batches, args.recipients, project_id)
            with stack(env, directory, "split") as (processes, api):
                requests.post(
                    f"{api}/v1/templates", json=TEMPLATE, headers={"Authorization": f"Bearer {key}"}, timeout=30
                ).raise_for_status()
                pids = {name: process.pid for name, process in processes.processes.items()}
                with PeakRss(pids) as rss:
                    accepted, _, batch_seconds = enqueue(api, key, bodies, clients=2)
                    batch_rss = rss.lines()
                with PeakRss(pids) as rss:
                    started = time.perf_counter()
                    batch_id, members = send_to_topic(api, key)
                    answered = time.perf_counter() - started
                    wait_fanned_out(engine, batch_id, args.timeout)
                    fanout_seconds = time.perf_counter() - started
                    fanout_rss = rss.lines()
            counts = messages_per_member(engine, project_id, batch_id)
        finally:
            projects.delete_project(db, redis_for(urls["REDIS_URL"]), project_id)
            engine.dispose()
    body = "\n".join(
        [
            f"topic of {args.members:,} members, generated set-based in {setup_seconds:.1f} s",
            f"batch API: {accepted:,} messages in {args.batches} requests of {args.recipients:,}: "
            f"{accepted / batch_seconds:,.0f} accepted/s",
            f"topic send: answered 202 in {answered * 1000:.0f} ms (accepted {members:,}); "
            f"every message written in {fanout_seconds:.1f} s: {members / fanout_seconds:,.0f} messages/s "
            f"({MEMBERS_PER_TASK:,} members per task)",
            f"ratio fan-out / batch API: {(members / fanout_seconds) / (accepted / batch_seconds):.2f}",
            f"members with no message {counts['none']:,}, exactly one {counts['once']:,}, "
            f"more than one {counts['more']:,}; messages to non-members {counts['strays']:,}",
            "peak RSS during the batch API run:",
            *(f"  {line}" for line in batch_rss),
            "peak RSS during the fan-out:",
            *(f"  {line}" for line in fanout_rss),
        ]
    )
    print(body)
    if not args.no_append:
        append_section("Topic fan-out beside the batch API (issue 15)", f"```\n{body}\n```")
    return 0 if counts["once"] == args.members and counts["more"] == counts["strays"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
