"""The ceiling for single sends: a bare Flask endpoint, served with the API's own gunicorn
settings, that parses the JSON body, INSERTs one row and publishes one task.

That is the least any single-send endpoint does; the difference to ours is authentication,
validation, the content row, and our code. Rows go to TABLE, a scratch table shaped like
messages that the benchmark creates and drops; tasks go to QUEUE, which nothing consumes
and the benchmark purges.

    TIDINGS_PORT=8001 python loadtest/bare_api.py --workers 2
"""

from __future__ import annotations

import argparse
from typing import Any

from flask import Flask, request
from sqlalchemy import text

from app.config import Settings
from app.db import engine_for
from app.delivery.broker import celery_app
from app.runtime import server
from tasks.celery_app import configure

TABLE = "bare_messages"
QUEUE = "bare"
INSERT = text(
    f"""
    INSERT INTO {TABLE} (id, project_id, channel, status, priority, to_address, created_at, updated_at)
    VALUES (gen_random_uuid(), 'bare', 'email', 'accepted', 'transactional', :to, now(), now())
    RETURNING id, created_at
    """
)


def create_app(settings: Settings) -> Flask:
    engine = engine_for(settings.database_url)
    configure(settings)
    app = Flask(__name__)

    @app.post("/v1/messages")
    def send() -> tuple[dict[str, Any], int]:
        body = request.get_json()
        with engine.begin() as connection:
            row = connection.execute(INSERT, {"to": body["to"]["email"]}).one()
        celery_app.send_task("tidings.prepare", args=([str(row.id)],), queue=QUEUE)
        return {"id": str(row.id), "status": "accepted", "created_at": row.created_at.isoformat()}, 202

    return app


class BareGunicorn(server._Gunicorn):
    def load(self) -> Flask:
        return create_app(self.settings)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers, as `tidings api --workers`")
    args = parser.parse_args(argv)
    # serve() owns the options the API runs with; swapping the class it starts changes only the app.
    server._Gunicorn = BareGunicorn
    server.serve(Settings.from_env(), args.workers)


if __name__ == "__main__":
    main()
