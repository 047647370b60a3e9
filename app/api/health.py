"""Liveness and readiness."""

from __future__ import annotations

import logging

from sqlalchemy import text

from app.api.blueprint import Blueprint
from app.api.context import context
from app.delivery.broker import celery_app

logger = logging.getLogger(__name__)

blp = Blueprint("health", __name__, description="Is the process up, and can it work?")


@blp.route("/healthz")
@blp.response(200)
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@blp.route("/readyz")
@blp.response(200)
@blp.alt_response(503)
def readyz() -> tuple[dict[str, object], int]:
    """PostgreSQL and the broker answer."""
    ctx = context()
    checks = {"database": _check(_database, ctx), "broker": _check(_broker, ctx)}
    ready = all(checks.values())
    return {"status": "ok" if ready else "unavailable", "checks": checks}, 200 if ready else 503


def _check(probe, ctx) -> bool:
    try:
        probe(ctx)
    except Exception as error:
        logger.warning("readiness check %s failed: %s", probe.__name__, error)
        return False
    return True


def _database(ctx) -> None:
    with ctx.db() as session:
        session.execute(text("SELECT 1"))


def _broker(ctx) -> None:
    if ctx.settings.broker_url == ctx.settings.redis_url:
        ctx.redis.ping()
        return
    with celery_app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1, timeout=1)
