"""The workflow benchmark: 100,000 runs of send → delay 5 s → branch unless opened → send.

    python loadtest/workflows.py [--runs 100000] [--opened 0.1] [--delay 5]

It starts the stack (the API under gunicorn, Celery workers, beat) as `make drain` does,
with the `log` email provider, makes `--runs` subscribers following one topic (generated
set-based in PostgreSQL), saves the workflow and triggers it once for the topic. While the
runs wait out their delay, a share of the first messages (`--opened`) is marked opened as
the tracking pixel would, so those runs stop at the branch and the others send again.

It reports, from the runs' own step records: runs/s through each step (steps over the
span of their records), the delay's lateness (branch taken minus the delay's end) p50 and
p99, and the rows written per run to each table (pg_stat inserts and updates). It checks
that every run completed, that exactly the runs whose first message was opened stopped,
and that each of the others has exactly two messages. Figures go to stdout and, unless
--no-append, BENCHMARKS.md. Against DATABASE_URL / REDIS_URL when set, embedded servers
otherwise; the project is deleted at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

import requests
from drain import TEMPLATE, stack
from harness import bench_env, servers, use_run_settings
from report import append_section
from sqlalchemy import Engine, create_engine, text

from app.config import Settings, database_url_from_env
from app.db import session_factory
from app.enums import KeyKind
from app.redis_client import redis_for
from app.runtime import migrate
from app.services import projects
from tasks.celery_app import configure

TOPIC = "everyone"
TABLES = ("workflow_runs", "workflow_run_steps", "workflow_triggers", "messages", "message_contents", "events")
STEP_NAMES = ("send", "delay", "branch", "send again")


def make_members(engine: Engine, project_id: str, members: int) -> None:
    """`members` subscribers, all following TOPIC, written set-based."""
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


def table_writes(engine: Engine) -> dict[str, int]:
    """Rows inserted plus rows updated so far, per table (pg_stat_user_tables)."""
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT relname, n_tup_ins + n_tup_upd AS writes FROM pg_stat_user_tables "
                "WHERE relname = ANY(CAST(:tables AS text[]))"
            ),
            {"tables": list(TABLES)},
        )
        return {row.relname: row.writes for row in rows}


def open_some(engine: Engine, project_id: str, share: float, deadline: float, runs: int) -> int:
    """Mark opened, as the tracking pixel does, the first message of every run whose id falls
    in `share`, as those messages appear; until every run's first send is recorded. How many."""
    modulus = round(1 / share)
    opened = 0
    with engine.connect() as connection:
        while time.monotonic() < deadline:
            done = connection.execute(
                text(
                    "SELECT count(*) FROM workflow_run_steps s JOIN workflow_runs r ON r.id = s.run_id "
                    "WHERE r.project_id = :p AND s.step = 0"
                ),
                {"p": project_id},
            ).scalar_one()
            opened += connection.execute(
                text(
                    """
                    INSERT INTO message_engagements (message_id, kind)
                    SELECT s.message_id, 'opened' FROM workflow_run_steps s JOIN workflow_runs r ON r.id = s.run_id
                    WHERE r.project_id = :p AND s.step = 0 AND abs(hashtext(r.id::text)) % :m = 0
                    ON CONFLICT DO NOTHING
                    """
                ),
                {"p": project_id, "m": modulus},
            ).rowcount
            connection.commit()
            if done >= runs:
                return opened
            time.sleep(0.3)
    raise RuntimeError("the runs' first sends did not all happen in time")


def wait_ended(engine: Engine, project_id: str, runs: int, deadline: float) -> None:
    with engine.connect() as connection:
        while time.monotonic() < deadline:
            ended = connection.execute(
                text("SELECT count(*) FROM workflow_runs WHERE project_id = :p AND status <> 'running'"),
                {"p": project_id},
            ).scalar_one()
            connection.commit()
            if ended >= runs:
                return
            time.sleep(0.5)
    raise RuntimeError("the runs did not all end in time")


def step_rates(engine: Engine, project_id: str) -> list[str]:
    """Per step: how many runs took it, over the span of their records, as runs/s."""
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                """
                SELECT s.step, count(*) AS n, extract(epoch FROM max(s.at) - min(s.at)) AS span
                FROM workflow_run_steps s JOIN workflow_runs r ON r.id = s.run_id
                WHERE r.project_id = :p GROUP BY s.step ORDER BY s.step
                """
            ),
            {"p": project_id},
        ).all()
    return [
        f"step {row.step} ({STEP_NAMES[row.step]}): {row.n:,} runs in {row.span:.1f} s: "
        f"{row.n / max(row.span, 0.001):,.0f} runs/s"
        for row in rows
    ]


def lateness(engine: Engine, project_id: str) -> tuple[float, float, float]:
    """How long after the delay's end the branch was taken, per run: p50, p99 and the largest, in seconds."""
    with engine.connect() as connection:
        row = connection.execute(
            text(
                """
                SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY late) AS p50,
                       percentile_cont(0.99) WITHIN GROUP (ORDER BY late) AS p99, max(late) AS most
                FROM (SELECT extract(epoch FROM b.at - CAST(d.detail ->> 'until' AS timestamptz)) AS late
                      FROM workflow_run_steps d JOIN workflow_run_steps b ON b.run_id = d.run_id AND b.step = 2
                      JOIN workflow_runs r ON r.id = d.run_id
                      WHERE r.project_id = :p AND d.step = 1) AS waits
                """
            ),
            {"p": project_id},
        ).one()
    return row.p50, row.p99, row.most


def outcomes(engine: Engine, project_id: str, modulus: int) -> dict[str, int]:
    """Runs by how they went, checked against which first messages were opened."""
    with engine.connect() as connection:
        row = connection.execute(
            text(
                """
                SELECT count(*) FILTER (WHERE r.status = 'completed') AS completed,
                       count(*) FILTER (WHERE b.outcome = 'stopped') AS stopped,
                       count(*) FILTER (WHERE b.outcome = 'stopped' AND abs(hashtext(r.id::text)) % :m <> 0)
                           AS stopped_unopened,
                       count(*) FILTER (WHERE b.outcome = 'continued' AND abs(hashtext(r.id::text)) % :m = 0)
                           AS continued_opened,
                       count(*) FILTER (WHERE b.outcome = 'continued'
                                        AND (SELECT count(*) FROM workflow_run_steps x
                                             WHERE x.run_id = r.id AND x.message_id IS NOT NULL) <> 2)
                           AS continued_without_two_messages
                FROM workflow_runs r LEFT JOIN workflow_run_steps b ON b.run_id = r.id AND b.step = 2
                WHERE r.project_id = :p
                """
            ),
            {"p": project_id, "m": modulus},
        ).one()
    return dict(row._mapping)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000, help="subscribers, one run each")
    parser.add_argument("--opened", type=float, default=0.1, help="share of first messages marked opened")
    parser.add_argument("--delay", type=int, default=5, help="seconds of the delay step")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds the whole run may take")
    parser.add_argument("--no-append", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    if not (1 <= args.runs <= 1_000_000 and 0.01 <= args.opened <= 0.5 and 1 <= args.delay <= 600):
        parser.error("need 1 <= runs <= 1,000,000, 0.01 <= opened <= 0.5, 1 <= delay <= 600")
    modulus = round(1 / args.opened)
    with servers() as urls, tempfile.TemporaryDirectory(prefix="workflows-") as scratch:
        directory = Path(scratch)
        use_run_settings(urls)
        database_url = database_url_from_env(urls)
        migrate.upgrade(database_url)
        engine = create_engine(database_url)
        db = session_factory(database_url)
        project_id = f"workflows-{uuid.uuid4().hex[:8]}"
        projects.create_project(db, {"id": project_id, "name": "Workflows", "channels": ["email"]})
        try:
            env = bench_env(urls, directory, EMAIL_PROVIDER="log", EMAIL_DAILY_QUOTA="none")
            configure(Settings.from_env(env))
            key = projects.create_key(db, project_id, "workflows", KeyKind.LIVE)["key"]
            auth = {"Authorization": f"Bearer {key}"}
            make_members(engine, project_id, args.runs)
            steps = [
                {"send": {"channel": "email", "template": TEMPLATE["key"]}},
                {"delay": {"for": f"{args.delay}s"}},
                {"branch": {"unless": {"was": "opened"}}},
                {"send": {"channel": "email", "template": TEMPLATE["key"]}},
            ]
            with stack(env, directory, "split") as (_, api):
                requests.post(f"{api}/v1/templates", json=TEMPLATE, headers=auth, timeout=30).raise_for_status()
                saved = requests.put(
                    f"{api}/v1/workflows/remind", json={"name": "Remind", "steps": steps}, headers=auth, timeout=30
                )
                saved.raise_for_status()
                writes_before = table_writes(engine)
                started = time.perf_counter()
                deadline = time.monotonic() + args.timeout
                answer = requests.post(
                    f"{api}/v1/workflows/remind/trigger",
                    json={"recipients": {"topic": TOPIC}, "data": {"issue": 7}},
                    headers=auth,
                    timeout=60,
                )
                answer.raise_for_status()
                opened = open_some(engine, project_id, args.opened, deadline, args.runs)
                wait_ended(engine, project_id, args.runs, deadline)
                seconds = time.perf_counter() - started
                time.sleep(2)  # table statistics reach pg_stat within a second of each commit
                writes_after = table_writes(engine)
            rates = step_rates(engine, project_id)
            p50, p99, most = lateness(engine, project_id)
            result = outcomes(engine, project_id, modulus)
        finally:
            projects.delete_project(db, redis_for(urls["REDIS_URL"]), project_id)
            engine.dispose()
    per_run = {table: (writes_after.get(table, 0) - writes_before.get(table, 0)) / args.runs for table in TABLES}
    body = "\n".join(
        [
            f"{args.runs:,} runs of send → delay {args.delay} s → branch unless opened → send, one topic trigger; "
            f"all ended in {seconds:.1f} s ({args.runs / seconds:,.0f} runs/s end to end)",
            *rates,
            f"delay lateness (branch taken after the delay's end): p50 {p50:.2f} s, p99 {p99:.2f} s, most {most:.2f} s",
            f"first messages marked opened: {opened:,}; runs completed {result['completed']:,}, stopped at the "
            f"branch {result['stopped']:,} (of them not opened: {result['stopped_unopened']:,}); opened but sent "
            f"again: {result['continued_opened']:,}; sent again without exactly two messages: "
            f"{result['continued_without_two_messages']:,}",
            "rows written per run (inserts + updates): "
            + ", ".join(f"{table} {count:.2f}" for table, count in per_run.items())
            + f"; total {sum(per_run.values()):.2f}",
        ]
    )
    print(body)
    if not args.no_append:
        append_section("Workflows: send → delay → branch unless opened → send (issue 15)", f"```\n{body}\n```")
    healthy = (
        result["completed"] == args.runs
        and result["stopped"] == opened
        and result["stopped_unopened"] == result["continued_opened"] == result["continued_without_two_messages"] == 0
    )
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
