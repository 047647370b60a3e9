"""Who a key is, remembered between requests (app/remembered.py says how and for how long).

Subscriber tokens are signed, not stored: what they act as is their project, remembered
the same way (apart from keys, so no key can ever be mistaken for a project id). Event
streams ask again at every heartbeat, and SMTP logins at every message, so a revoked key's
stream ends within one heartbeat and its SMTP session sends nothing more.
"""

from __future__ import annotations

from collections.abc import Callable

import redis
from sqlalchemy.orm import Session, sessionmaker

from app.access.auth import Caller, find_caller, find_project_caller
from app.remembered import Remembered, read_generation, request_generation


class CallerCache:
    def __init__(self, db: sessionmaker[Session], client: redis.Redis):
        self.db = db
        self.client = client
        # Remembered under ("key", token) or ("project", project id).
        self._callers: Remembered[tuple[str, str], Caller] = Remembered()

    def caller(self, token: str, fresh: bool = False) -> Caller | None:
        """The caller the API key `token` authenticates, or None; unknown keys are never remembered.

        `fresh`: against the generation now rather than the one the request began with, for
        a stream that asks again at every heartbeat whether its key still holds."""
        return self._remembered(("key", token), lambda session: find_caller(session, token), fresh)

    def project_caller(self, project_id: str, fresh: bool = False) -> Caller | None:
        """Who a subscriber token of `project_id` acts as, or None once the project is gone."""
        return self._remembered(
            ("project", project_id), lambda session: find_project_caller(session, project_id), fresh
        )

    def _remembered(
        self, key: tuple[str, str], look_up: Callable[[Session], Caller | None], fresh: bool
    ) -> Caller | None:
        generation = read_generation(self.client) if fresh else request_generation(self.client)
        return self._callers.get(key, generation, lambda: self._look_up(look_up))

    def _look_up(self, look_up: Callable[[Session], Caller | None]) -> Caller | None:
        with self.db() as session:
            return look_up(session)
