"""Who a key is, remembered between requests.

Looking a key up in PostgreSQL cost every API request a pooled connection, a ping, a
query and a rollback. So each API process remembers the callers it has seen, stamped with
the key generation kept in Redis, and trusts an entry only while that generation is
unchanged and the entry is younger than MAX_AGE_SECONDS: one Redis GET per request instead.

Whatever changes what a key may do (revoking it, changing or deleting its project) calls
`forget_all` after its commit, which sets a new generation, so every process drops what it
remembers at once. The generation is read before PostgreSQL is asked, so a change that
commits in between leaves the entry stamped with the old generation, never the new one.
When Redis cannot be asked, every lookup goes to PostgreSQL; a change whose new generation
never reached Redis is seen within MAX_AGE_SECONDS.

Subscriber tokens are signed, not stored: what they act as is their project, remembered
the same way (apart from keys, so no key can ever be mistaken for a project id). Event
streams ask again at every heartbeat, so a revoked key's stream ends within one.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis
from sqlalchemy.orm import Session, sessionmaker

from app.access.auth import Caller, find_caller, find_project_caller

logger = logging.getLogger(__name__)

GENERATION_KEY = "tidings:auth:generation"
MAX_AGE_SECONDS = 30.0
MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class _Entry:
    caller: Caller
    generation: bytes | None
    at: float


class _Unknown:
    """The generation when Redis could not be asked: nothing may be trusted or stored."""


# What an entry is remembered under: ("key", token) or ("project", project id).
_Key = tuple[str, str]


class CallerCache:
    def __init__(self, db: sessionmaker[Session], client: redis.Redis):
        self.db = db
        self.client = client
        self._entries: dict[_Key, _Entry] = {}
        self._lock = threading.Lock()

    def caller(self, token: str) -> Caller | None:
        """The caller the API key `token` authenticates, or None; unknown keys are never remembered."""
        return self._remembered(("key", token), lambda session: find_caller(session, token))

    def project_caller(self, project_id: str) -> Caller | None:
        """Who a subscriber token of `project_id` acts as, or None once the project is gone."""
        return self._remembered(("project", project_id), lambda session: find_project_caller(session, project_id))

    def _remembered(self, key: _Key, look_up: Callable[[Session], Caller | None]) -> Caller | None:
        generation = self._generation()
        if isinstance(generation, _Unknown):
            return self._look_up(look_up)
        now = time.monotonic()
        entry = self._entries.get(key)
        if entry is not None and entry.generation == generation and now - entry.at < MAX_AGE_SECONDS:
            return entry.caller
        caller = self._look_up(look_up)
        if caller is not None:
            self._remember(key, _Entry(caller, generation, now))
        return caller

    def _look_up(self, look_up: Callable[[Session], Caller | None]) -> Caller | None:
        with self.db() as session:
            return look_up(session)

    def _generation(self) -> bytes | _Unknown | None:
        try:
            return self.client.get(GENERATION_KEY)
        except redis.RedisError as error:
            logger.warning("key generation unavailable, asking PostgreSQL: %s", error)
            return _Unknown()

    def _remember(self, key: _Key, entry: _Entry) -> None:
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[key] = entry


def forget_all(client: redis.Redis) -> None:
    """Make every API process ask PostgreSQL again; logged, not raised, when Redis is down
    (the change is committed, and MAX_AGE_SECONDS bounds how long it goes unseen)."""
    try:
        client.set(GENERATION_KEY, secrets.token_hex(8))
    except redis.RedisError as error:
        logger.warning(
            "could not publish a new key generation; cached callers expire within %ss: %s", MAX_AGE_SECONDS, error
        )
