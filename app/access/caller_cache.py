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
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass

import redis
from sqlalchemy.orm import Session, sessionmaker

from app.access.auth import Caller, find_caller

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


class CallerCache:
    def __init__(self, db: sessionmaker[Session], client: redis.Redis):
        self.db = db
        self.client = client
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def caller(self, token: str) -> Caller | None:
        """The caller `token` authenticates, or None; unknown keys are never remembered."""
        generation = self._generation()
        if isinstance(generation, _Unknown):
            return self._look_up(token)
        now = time.monotonic()
        entry = self._entries.get(token)
        if entry is not None and entry.generation == generation and now - entry.at < MAX_AGE_SECONDS:
            return entry.caller
        caller = self._look_up(token)
        if caller is not None:
            self._remember(token, _Entry(caller, generation, now))
        return caller

    def _look_up(self, token: str) -> Caller | None:
        with self.db() as session:
            return find_caller(session, token)

    def _generation(self) -> bytes | _Unknown | None:
        try:
            return self.client.get(GENERATION_KEY)
        except redis.RedisError as error:
            logger.warning("key generation unavailable, asking PostgreSQL: %s", error)
            return _Unknown()

    def _remember(self, token: str, entry: _Entry) -> None:
        with self._lock:
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[token] = entry


def forget_all(client: redis.Redis) -> None:
    """Make every API process ask PostgreSQL again; logged, not raised, when Redis is down
    (the change is committed, and MAX_AGE_SECONDS bounds how long it goes unseen)."""
    try:
        client.set(GENERATION_KEY, secrets.token_hex(8))
    except redis.RedisError as error:
        logger.warning(
            "could not publish a new key generation; cached callers expire within %ss: %s", MAX_AGE_SECONDS, error
        )
