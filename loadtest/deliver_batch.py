"""What one deliver batch costs, in process: CPU, Redis round trips and SQL statements.

    python loadtest/deliver_batch.py [--mode batch|single] [--batches 60]

The drain's path without its processes: bulk messages accepted through the batch API (a
Flask test client), released and prepared here, then `tidings.deliver_next` run here batch
by batch through the `log` provider (100 messages a call, or one with --mode single, as in
the drain). It counts every Redis round trip (a pipeline or a script is one) and command,
every SQL statement, transaction and connection check, and the process CPU time per batch
with the worker's garbage collector settings (gc.freeze after start-up, tasks/celery_app.py).
CPU time, not wall-clock: on a shared machine it is the figure the noise moves least.
Against DATABASE_URL / REDIS_URL when set (it flushes that Redis database), embedded
servers otherwise.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

MODES = {"batch": "100", "single": "1"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, default="batch", help="log provider: 100 a call, or one")
    parser.add_argument("--batches", type=int, default=60, help="deliver batches to run and count (1-500)")
    args = parser.parse_args(argv)
    if not 1 <= args.batches <= 500:
        parser.error("need 1 <= batches <= 500")
    # Read when the provider's class is defined: set before the application is imported.
    os.environ["LOG_PROVIDER_MAX_BATCH"] = MODES[args.mode]
    from harness import servers

    with servers() as urls:
        return measure(urls, args.mode, args.batches)


def measure(urls: dict[str, str], mode: str, batches: int) -> int:
    import redis
    from harness import use_run_settings
    from redis.connection import AbstractConnection
    from sqlalchemy import Engine, event, text

    from app.api import create_app
    from app.db import engine_for, session_factory, session_scope
    from app.delivery import dispatch
    from app.enums import KeyKind
    from app.runtime import migrate
    from app.services import projects
    from tasks.celery_app import configure
    from tasks.deliver import deliver_next
    from tasks.prepare import prepare_batch

    settings = use_run_settings(urls)
    configure(settings)
    database_url = settings.database_url
    migrate.upgrade(database_url)
    redis.Redis.from_url(settings.redis_url).flushdb()
    project = f"batch-{uuid.uuid4().hex[:8]}"
    projects.create_project(session_factory(database_url), {"id": project, "name": project, "channels": ["email"]})
    key = projects.create_key(session_factory(database_url), project, "bench", KeyKind.LIVE)["key"]
    client = create_app(settings).test_client()
    headers = {"Authorization": f"Bearer {key}"}
    template = {
        "key": "t",
        "channel": "email",
        "subject": "Issue {{ n }}",
        "text": "Hi {{ n }}",
        "html": "<p>{{ n }}</p>",
    }
    if client.post("/v1/templates", json=template, headers=headers).status_code != 201:
        raise SystemExit("could not create the template")
    per_batch = dispatch.deliver_chunk("log")
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    body = {
        "channel": "email",
        "template": "t",
        "data": {"n": 1},
        "priority": "bulk",
        "scheduled_at": later,
        "recipients": [{"email": f"r{n}@example.com"} for n in range(per_batch * batches)],
    }
    answer = client.post("/v1/messages/batch", json=body, headers=headers)
    if answer.status_code != 202:
        raise SystemExit(f"the batch API answered {answer.status_code}: {answer.get_data(as_text=True)[:300]}")
    with session_scope(database_url) as session:
        release = (
            "UPDATE messages SET status = 'accepted', scheduled_at = now() WHERE project_id = :p RETURNING id::text"
        )
        ids = list(session.execute(text(release), {"p": project}).scalars())
    for start in range(0, len(ids), dispatch.CHUNK):
        prepare_batch(settings, ids[start : start + dispatch.CHUNK])

    counts: Counter[str] = Counter()
    send_packed = AbstractConnection.send_packed_command
    execute_command = redis.Redis.execute_command
    execute_pipeline = redis.client.Pipeline._execute_pipeline

    def counted_send(self, command, check_health=True):
        counts["Redis round trips"] += 1
        return send_packed(self, command, check_health)

    def counted_command(self, *command, **options):
        counts[f"Redis {command[0]}"] += 1
        return execute_command(self, *command, **options)

    def counted_pipeline(self, connection, commands, raise_on_error):
        counts.update(f"Redis {c[0][0]} (pipelined)" for c in commands)
        return execute_pipeline(self, connection, commands, raise_on_error)

    def statement(_conn, _cursor, sql, *_):
        counts["SQL statements"] += 1
        counts[f"SQL {' '.join(sql.split())[:60]}"] += 1

    engine = engine_for(database_url)
    ping = engine.dialect.do_ping

    def counted_ping(connection):
        counts["SQL connection checks (pre-ping)"] += 1
        return ping(connection)

    AbstractConnection.send_packed_command = counted_send
    redis.Redis.execute_command = counted_command
    redis.client.Pipeline._execute_pipeline = counted_pipeline
    event.listen(Engine, "before_cursor_execute", statement)
    event.listen(Engine, "begin", lambda _conn: counts.update(["SQL transactions"]))
    engine.dialect.do_ping = counted_ping
    gc.freeze()  # as a worker does once it is ready
    started = time.process_time()
    for _ in range(batches):
        deliver_next.run("log", "bulk")
    cpu = time.process_time() - started
    counted = dict(counts)  # before the count below adds its own statement
    with session_scope(database_url) as session:
        sent = session.scalar(
            text("SELECT count(*) FROM messages WHERE project_id = :p AND status = 'sent'"), {"p": project}
        )
    print(f"mode {mode}: {batches} deliver batches of {per_batch}, {sent} of {len(ids)} sent")
    print(f"  CPU per batch {1000 * cpu / batches:.2f} ms, per message {1e6 * cpu / max(sent, 1):.1f} us")
    totals = ("Redis round trips", "SQL statements", "SQL transactions", "SQL connection checks (pre-ping)")
    for name, count in sorted(counted.items(), key=lambda item: (item[0] not in totals, item[0])):
        print(f"  {count / batches:7.2f} per batch  {name}")
    return 0 if sent == len(ids) else 1


if __name__ == "__main__":
    sys.exit(main())
