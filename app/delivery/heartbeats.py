"""Which worker processes are alive: a heartbeat per process, in one Redis hash.

A claim names the process that holds it (tasks/heartbeat.py); the sweeper asks here which
of those stopped beating, so a killed worker's claims are settled within seconds rather
than after the claim timeout. Every beat is stamped with Redis's own clock, so hosts whose
clocks disagree still agree on who is silent.

A process is silent when its last beat is `dead_after` seconds older than the newest beat
of any process. Measured against the newest beat, not against now: after Redis or the
network comes back (a restored snapshot holds only old beats) nobody is judged until
beats arrive again, and then every live process beats within one interval. A Redis that
lost the hash forgets every process, which only leaves their claims to the claim timeout.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

KEY = "tidings:workers"

# KEYS: the hash. ARGV: the process. Its beat, in milliseconds of Redis's clock.
_BEAT = """
local now = redis.call('TIME')
redis.call('HSET', KEYS[1], ARGV[1], now[1] * 1000 + math.floor(now[2] / 1000))
"""


@dataclass(frozen=True)
class Silent:
    """A process that stopped beating, and how long ago its last beat was (by Redis's clock)."""

    worker: str
    seconds: float


def beat(client: redis.Redis, worker: str) -> None:
    client.eval(_BEAT, 1, KEY, worker)


def silent(client: redis.Redis, dead_after: float) -> list[Silent]:
    """The processes whose beats stopped `dead_after` seconds before the newest beat."""
    with client.pipeline(transaction=False) as pipe:
        pipe.time()
        pipe.hgetall(KEY)
        (seconds, micros), beats = pipe.execute()
    if not beats:
        return []
    now_ms = seconds * 1000 + micros // 1000
    last = {worker.decode(): int(at) for worker, at in beats.items()}
    newest = max(last.values())
    return [Silent(w, (now_ms - at) / 1000) for w, at in last.items() if newest - at > dead_after * 1000]


def forget(client: redis.Redis, workers: list[str]) -> None:
    """Drop processes whose claims were settled; one that was only cut off beats itself back in."""
    if workers:
        client.hdel(KEY, *workers)
