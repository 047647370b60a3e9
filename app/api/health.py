"""Liveness and readiness."""

from __future__ import annotations

import logging

from sqlalchemy import text

from app.api.blueprint import Blueprint
from app.api.context import context
from app.api.contract import OPERATIONS, PUBLIC
from app.delivery.broker import celery_app

logger = logging.getLogger(__name__)

blp = Blueprint("health", __name__, access=PUBLIC, tag=OPERATIONS, description="Is the process up, and can it work?")


@blp.route("/healthz")
@blp.response(200, example={"status": "ok"})
def healthz() -> dict[str, str]:
    """Liveness.

    The process is up: answers without touching PostgreSQL or the broker, for a supervisor's liveness probe.
    """
    return {"status": "ok"}


@blp.route("/readyz")
@blp.response(200, example={"status": "ok", "checks": {"database": True, "broker": True}})
@blp.alt_response(503, example={"status": "unavailable", "checks": {"database": True, "broker": False}})
def readyz() -> tuple[dict[str, object], int]:
    """Readiness.

    PostgreSQL and the broker answer: 200 when both do, 503 naming the one that does not, for a load balancer's
    readiness probe.
    """
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
