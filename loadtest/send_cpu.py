"""Python CPU per single send, in process: what `POST /v1/messages` costs the API beside
the least a send endpoint can cost (loadtest/bare_api.py's INSERT + publish).

    python loadtest/send_cpu.py [--sends 1000] [--rounds 9]

Both apps are called through Flask's test client in this one process, so the figure is
our code, Flask, flask-smorest, marshmallow, SQLAlchemy and the drivers — not the WSGI
server, the network or the other processes, which the soak and `loadtest/singles.py`
measure. Each round times `--sends` sends with `time.process_time` for ours and then for
the bare endpoint. CPU time still drifts with a busy neighbour (the same code measured
2.1 to 3.3 ms here in one hour), so the figure to compare is the median of each round's
ratio of ours to the bare floor timed beside it. Against DATABASE_URL / REDIS_URL when set,
embedded servers otherwise; the project, its messages and the published tasks are removed
at the end. Figures go to stdout and, unless --no-append, BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from statistics import median

from bare_api import QUEUE
from bare_api import create_app as create_bare_app
from drain import TEMPLATE
from flask.testing import FlaskClient
from harness import bench_env, servers
from report import append_section
from singles import bare_table, purge
from sqlalchemy import create_engine

from app.api import create_app
from app.config import Settings, use_settings
from app.db import session_factory
from app.delivery.queues import prepare_queue
from app.enums import KeyKind, Priority
from app.redis_client import redis_for
from app.runtime import migrate
from app.services import projects

WARM_UP = 200


def cpu_ms_per_send(send: Callable[[int], None], sends: int) -> float:
    started = time.process_time()
    for n in range(sends):
        send(n)
    return (time.process_time() - started) * 1000 / sends


def sender(client: FlaskClient, headers: dict[str, str], body: Callable[[int], dict]) -> Callable[[int], None]:
    """One send through `client`; anything but 202 stops the run, since it would measure an error path."""

    def send(n: int) -> None:
        answer = client.post("/v1/messages", json=body(n), headers=headers)
        if answer.status_code != 202:
            raise RuntimeError(f"send answered {answer.status_code}: {answer.get_data(as_text=True)[:500]}")

    return send


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=1000, help="sends per round and app")
    parser.add_argument("--rounds", type=int, default=9, help="rounds, each timing both apps")
    parser.add_argument("--no-append", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    if not (100 <= args.sends <= 100_000 and 1 <= args.rounds <= 30):
        parser.error("need 100 <= sends <= 100,000 and 1 <= rounds <= 30")
    with servers() as urls, tempfile.TemporaryDirectory(prefix="send-cpu-") as scratch:
        settings = use_settings(Settings.from_env(bench_env(urls, Path(scratch), EMAIL_PROVIDER="log")))
        migrate.upgrade(settings.database_url)
        engine = create_engine(settings.database_url)
        db = session_factory(settings.database_url)
        project_id = f"send-cpu-{uuid.uuid4().hex[:8]}"
        projects.create_project(db, {"id": project_id, "name": "Send CPU", "channels": ["email"]})
        try:
            key = projects.create_key(db, project_id, "send-cpu", KeyKind.LIVE)["key"]
            headers = {"Authorization": f"Bearer {key}"}
            ours = create_app(settings).test_client()
            saved = ours.post("/v1/templates", json=TEMPLATE, headers=headers)
            if saved.status_code != 201:
                raise RuntimeError(f"the template was not saved: {saved.get_data(as_text=True)[:500]}")
            send_ours = sender(
                ours,
                headers,
                lambda n: {
                    "channel": "email",
                    "to": {"email": f"s{n}@example.com"},
                    "template": TEMPLATE["key"],
                    "data": {"issue": n},
                },
            )
            send_bare = sender(create_bare_app(settings).test_client(), {}, lambda n: {"to": {"email": f"s{n}@x.io"}})
            ours_ms, bare_ms = [], []
            with bare_table(engine):
                for send in (send_ours, send_bare):
                    cpu_ms_per_send(send, WARM_UP)
                for _ in range(args.rounds):
                    ours_ms.append(cpu_ms_per_send(send_ours, args.sends))
                    bare_ms.append(cpu_ms_per_send(send_bare, args.sends))
        finally:
            purge(settings, [prepare_queue(Priority.TRANSACTIONAL), QUEUE])
            projects.delete_project(db, redis_for(settings.redis_url), project_id)
            engine.dispose()
    ratios = [o / b for o, b in zip(ours_ms, bare_ms, strict=True)]
    body = "\n".join(
        [
            f"{args.sends:,} sends per round, {args.rounds} rounds, Flask's test client in one process (CPU time)",
            "",
            "| | median ms CPU per send | every round |",
            "|---|---|---|",
            f"| `POST /v1/messages` | {median(ours_ms):.2f} | {', '.join(f'{v:.2f}' for v in ours_ms)} |",
            f"| bare endpoint (INSERT + publish) | {median(bare_ms):.2f} | {', '.join(f'{v:.2f}' for v in bare_ms)} |",
            f"| ours / bare, per round | {median(ratios):.2f} | {', '.join(f'{v:.2f}' for v in ratios)} |",
        ]
    )
    print(body)
    if not args.no_append:
        append_section("Single send: Python CPU per send in process", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
