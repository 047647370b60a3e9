"""Messages handed to a provider per ten-second slot, per project: the digest's throughput.

Counting `sent_at` in PostgreSQL would need an index that every finalise pays for; a
Redis hash per slot costs one HINCRBY per delivered batch and expires by itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import redis

SLOT_SECONDS = 10
KEEP_SECONDS = 3600 + 2 * SLOT_SECONDS
PREFIX = "tidings:sent:"


def add(pipe: redis.client.Pipeline, sent_by_project: Mapping[str, int], now: float | None = None) -> None:
    """Queue the counts of one batch on `pipe` (sent with the batch's other numbers)."""
    if not sent_by_project:
        return
    key = PREFIX + str(int((now or time.time()) // SLOT_SECONDS))
    for project, count in sent_by_project.items():
        pipe.hincrby(key, project, count)
    pipe.expire(key, KEEP_SECONDS)


def sent_within(client: redis.Redis, seconds: int, project: str | None = None, now: float | None = None) -> int:
    """Messages sent in the last `seconds` (rounded up to whole slots), for one project or all."""
    current = int((now or time.time()) // SLOT_SECONDS)
    keys = [PREFIX + str(slot) for slot in range(current - seconds // SLOT_SECONDS + 1, current + 1)]
    with client.pipeline(transaction=False) as pipe:
        for key in keys:
            if project:
                pipe.hget(key, project)
            else:
                pipe.hvals(key)
        answers = pipe.execute()
    if project:
        return sum(int(value) for value in answers if value is not None)
    return sum(int(value) for values in answers for value in values)
