"""What a process remembers of PostgreSQL between requests, and how every process forgets it at once.

Asking PostgreSQL on every request who a key is, or which version of a template a send
pins, cost each request a pooled connection, a query and its result: most of the API's
own CPU beside the send's INSERT. So a process remembers what it looked up, stamped with
the generation kept in Redis, and trusts an entry only while that generation is unchanged
and the entry is younger than MAX_AGE_SECONDS: one Redis GET instead of a query.

Whatever changes something remembered (revoking a key, changing or deleting a project,
saving a template's new version) calls `forget_all` after its commit, which sets a new
generation, so every process drops what it remembers at once. The generation is read
before PostgreSQL is asked, so a change that commits in between leaves the entry stamped
with the old generation, never the new one. When Redis cannot be asked, every lookup goes
to PostgreSQL; a change whose new generation never reached Redis is seen within
MAX_AGE_SECONDS. Nothing that was not found is remembered, so what appears is seen at once.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

import redis
from flask import g, has_request_context

logger = logging.getLogger(__name__)

# The name is older than templates being remembered too; processes of two releases side by
# side during an upgrade must agree on it.
GENERATION_KEY = "tidings:auth:generation"
MAX_AGE_SECONDS = 30.0
MAX_ENTRIES = 10_000

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Unknown:
    """The generation when Redis could not be asked: nothing may be trusted or stored."""


Generation = bytes | Unknown | None


def request_generation(client: redis.Redis) -> Generation:
    """The generation, read once per request: what a request looks up (its caller, its
    template) is all asked after its start, so one reading stamps them all."""
    if not has_request_context():
        return read_generation(client)
    if "generation" not in g:
        g.generation = read_generation(client)
    return g.generation


def read_generation(client: redis.Redis) -> Generation:
    """The generation now: for what asks again long after its request began (a stream)."""
    try:
        return cast(bytes | None, client.get(GENERATION_KEY))  # our clients do not decode answers
    except redis.RedisError as error:
        logger.warning("generation unavailable, asking PostgreSQL: %s", error)
        return Unknown()


@dataclass(frozen=True)
class _Entry(Generic[V]):
    value: V
    generation: bytes | None
    at: float


class Remembered(Generic[K, V]):
    """One kind of lookup's answers in this process, at most MAX_ENTRIES of them (all are
    dropped when full: simpler than an LRU, and a process rarely sees that many keys)."""

    def __init__(self) -> None:
        self._entries: dict[K, _Entry[V]] = {}
        self._lock = threading.Lock()

    def get(self, key: K, generation: Generation, look_up: Callable[[], V | None]) -> V | None:
        """The remembered answer for `key` while still good at `generation`; else `look_up()`'s,
        remembered unless it is None or Redis could not be asked."""
        if isinstance(generation, Unknown):
            return look_up()
        now = time.monotonic()
        entry = self._entries.get(key)
        if entry is not None and entry.generation == generation and now - entry.at < MAX_AGE_SECONDS:
            return entry.value
        value = look_up()
        if value is not None:
            with self._lock:
                if len(self._entries) >= MAX_ENTRIES:
                    self._entries.clear()
                self._entries[key] = _Entry(value, generation, now)
        return value


def forget_all(client: redis.Redis) -> None:
    """Make every process ask PostgreSQL again; logged, not raised, when Redis is down
    (the change is committed, and MAX_AGE_SECONDS bounds how long it goes unseen)."""
    try:
        client.set(GENERATION_KEY, secrets.token_hex(8))
    except redis.RedisError as error:
        logger.warning(
            "could not publish a new generation; what processes remember expires within %ss: %s",
            MAX_AGE_SECONDS,
            error,
        )
