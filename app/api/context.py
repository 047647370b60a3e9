"""What every request handler shares with its process: settings, database, Redis, limiter, streams, callers,
large bodies."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from flask import current_app
from sqlalchemy.orm import Session, sessionmaker

from app.access.caller_cache import CallerCache
from app.access.ratelimit import ApiRateLimiter
from app.api.body_budget import BodyBudget
from app.config import Settings
from app.observability.streams import Hub


@dataclass(frozen=True)
class Context:
    """What handlers need from the process: settings, database, Redis."""

    settings: Settings
    db: sessionmaker[Session]
    redis: redis.Redis
    limiter: ApiRateLimiter
    hub: Hub
    callers: CallerCache
    bodies: BodyBudget


def context() -> Context:
    return current_app.extensions["tidings"]
