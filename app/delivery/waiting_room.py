"""Messages put off by a provider's pause or pace wait together, and leave together.

A pause (a 429's Retry-After, an operator's hand) puts off every deliver task that comes
for its provider while it lasts. Ids taken in their projects' turn go back to it
(app/delivery/fairness.py); the others (retries, failover, a run after a death) come one
or a few per task. Had each
gone back to the broker with its own countdown, all of them would wake when the pause
ends and leave as one provider call each: hundreds of calls within a second, inviting
the next 429. Instead their ids wait on their lane's list in Redis, and one release token
per lane (`tidings.deliver_waiting`) wakes when the wait is over: it takes a
provider-sized batch, sends it at the provider's pace, and then sends the next token on
while ids remain. A batch the pause or the pace puts off again goes back with a token of
the right countdown, and that token is the lane's next: a lane never spins while it waits.

Nothing here is the truth: the rows stay `ready`, with the end of the wait as their
deadline (app/delivery/store.py `expect_ready_by`), so ids lost with Redis, or a token
lost with its worker, are re-dispatched by the sweeper; an id that waits twice is claimed
once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from app.config import MAX_COUNTDOWN, current_settings
from app.delivery import dispatch, fairness
from app.delivery.broker import celery_app
from app.delivery.queues import deliver_queue
from app.redis_client import redis_for

PREFIX = "tidings:waiting:"
# A lane's list outlives the longest countdown; a list nobody released by then is the sweeper's.
KEEP_SECONDS = 2 * MAX_COUNTDOWN
# The marker of a scheduled token outlives its countdown by this much, for a broker that is late.
GRACE_MS = 5_000

# KEYS: the lane's list, its token marker. ARGV: the list's TTL, the marker's TTL in ms, ids.
# True when no token was scheduled yet: the caller publishes one.
_PARK = """
for i = 3, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) ~= false
"""
# KEYS: the lane's list, its token marker. ARGV: how many ids to take. The token that runs
# this is spent; the ids.
_TAKE = """
redis.call('DEL', KEYS[2])
local ids = redis.call('LRANGE', KEYS[1], 0, ARGV[1] - 1)
redis.call('LTRIM', KEYS[1], #ids, -1)
return ids
"""


def waiting_list(lane: str) -> str:
    return f"{PREFIX}{lane}"


def marker(lane: str) -> str:
    return f"{PREFIX}{lane}:token"


class WaitingIds:
    """Ids of one lane put off by `countdown`, published as the outbox publishes a Signature
    (app.db.publish): onto the lane's list, and a release token if none is on its way."""

    def __init__(self, provider: str, priority: str, ids: Sequence[str], countdown: float):
        self.provider = provider
        self.priority = priority
        self.ids = [str(i) for i in ids]
        self.countdown = countdown
        self.task = "tidings.deliver_waiting"

    def apply_async(self, **options: Any) -> None:
        client = redis_for(current_settings().redis_url)
        lane = deliver_queue(self.provider, self.priority)
        marker_ms = int(self.countdown * 1000) + GRACE_MS
        keys = (waiting_list(lane), marker(lane))
        if client.eval(_PARK, 2, *keys, KEEP_SECONDS, marker_ms, *self.ids):
            release_token(self.provider, self.priority).apply_async(countdown=self.countdown, **options)


def take(client: redis.Redis, provider: str, priority: str, size: int) -> list[str]:
    """Up to `size` waiting ids of the lane, oldest first; the token that takes them is spent."""
    lane = deliver_queue(provider, priority)
    return [i.decode() for i in client.eval(_TAKE, 2, waiting_list(lane), marker(lane), size)]


def release_more(client: redis.Redis, provider: str, priority: str) -> None:
    """Once a taken batch is sent: the next token at once while ids wait, unless the batch
    was put off again and so scheduled its own at the end of the wait."""
    lane = deliver_queue(provider, priority)
    if client.llen(waiting_list(lane)) and client.set(marker(lane), "1", nx=True, px=GRACE_MS):
        release_token(provider, priority).apply_async()


def release_now(client: redis.Redis, provider: str, priorities: Sequence[str]) -> None:
    """Wake `provider`'s lanes now (an operator resumed it): their ids, in the waiting room
    or waiting their projects' turn (app/delivery/fairness.py), need not wait out the
    countdown the pause gave them. A token more than the chunks need finds nothing."""
    for priority in priorities:
        lane = deliver_queue(provider, priority)
        if client.exists(waiting_list(lane)):
            client.set(marker(lane), "1", px=GRACE_MS)
            release_token(provider, priority).apply_async()
        for _ in range(fairness.waiting(client, lane)):
            dispatch.deliver_token(provider, priority).apply_async()


def release_token(provider: str, priority: str):
    return celery_app.signature(
        "tidings.deliver_waiting", args=(provider, priority), queue=deliver_queue(provider, priority)
    )
