"""Messages handed to a provider per ten-second slot, per project: the digest's throughput.

Counting `sent_at` in PostgreSQL would need an index that every finalise pays for; a
Redis hash per slot costs one HINCRBY per delivered batch and expires by itself.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

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


def sent_within(
    client: redis.Redis, windows: Sequence[int], project: str | None = None, now: float | None = None
) -> list[int]:
    """Messages sent in each of the last `windows` seconds (rounded up to whole slots), for
    one project or all, read in one round trip."""
    current = int((now or time.time()) // SLOT_SECONDS)
    slots = range(current, current - max(windows) // SLOT_SECONDS, -1)
    with client.pipeline(transaction=False) as pipe:
        for slot in slots:
            if project:
                pipe.hget(PREFIX + str(slot), project)
            else:
                pipe.hvals(PREFIX + str(slot))
        answers = pipe.execute()
    per_slot = [int(a or 0) if project else sum(int(v) for v in a) for a in answers]
    return [sum(per_slot[: window // SLOT_SECONDS]) for window in windows]
