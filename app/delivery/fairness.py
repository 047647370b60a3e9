"""Bulk work taken in turn per project: one project's campaign never holds another's send behind it.

A broker queue is first in, first out: a 500,000-message campaign queued as 1,000 tasks
would make a 200-message bulk send of another project wait for all of them. Prepare is
fast, so its lane would only make B wait seconds; a provider that allows 14 messages a
second would make it wait ten hours in the deliver lane. So in both bulk lanes a chunk
is not put in the broker: it goes on its project's list in Redis, the project joins the
lane's ring of projects with work waiting, and the broker gets a token per chunk
(`tidings.prepare_next`, `tidings.deliver_next`). A worker running a token takes the
chunk of the project at the head of the ring, which goes to the back if it has more. The
broker still says how much work there is and who may do it (lanes, priorities,
prefetch); Redis says in which order. A deliver chunk the provider's pace did not admit
whole goes back to the head of its project's list (`give_back`), behind the others' turn.

Nothing here is the truth: the ids are accepted or ready rows in PostgreSQL. A chunk lost
with Redis, or whose worker died, is re-dispatched by the sweeper like any lost task; a
token that finds nothing does nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis
from celery.canvas import Signature

from app.config import current_settings
from app.redis_client import redis_for

PREFIX = "tidings:fair:"
# Lists, rings and counts of a lane idle this long go; a busy lane refreshes them at every chunk.
KEEP_SECONDS = 24 * 3600

# KEYS: the ring, the lane's count of chunks. ARGV: prefix of the projects' lists, the project,
# TTL, RPUSH (behind the project's other chunks) or LPUSH (ahead of them), then the chunks.
_DEPOSIT = """
local list = ARGV[1] .. ARGV[2]
for i = 5, #ARGV do redis.call(ARGV[4], list, ARGV[i]) end
redis.call('EXPIRE', list, ARGV[3])
if redis.call('LPOS', KEYS[1], ARGV[2]) == false then redis.call('RPUSH', KEYS[1], ARGV[2]) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('INCRBY', KEYS[2], #ARGV - 4)
redis.call('EXPIRE', KEYS[2], ARGV[3])
"""
# KEYS: the ring, the lane's count of chunks. ARGV: prefix of the projects' lists, TTL. The head
# and its next chunk; the head goes to the back while it has more, and leaves the ring when it
# has none. A lane at work keeps its keys alive, however long a campaign takes.
_WITHDRAW = """
for _ = 1, redis.call('LLEN', KEYS[1]) do
  local project = redis.call('LPOP', KEYS[1])
  local chunk = redis.call('LPOP', ARGV[1] .. project)
  if chunk then
    if redis.call('LLEN', ARGV[1] .. project) > 0 then
      redis.call('RPUSH', KEYS[1], project)
      redis.call('EXPIRE', ARGV[1] .. project, ARGV[2])
    end
    if redis.call('DECR', KEYS[2]) <= 0 then redis.call('DEL', KEYS[2]) else redis.call('EXPIRE', KEYS[2], ARGV[2]) end
    redis.call('EXPIRE', KEYS[1], ARGV[2])
    return {project, chunk}
  end
end
return false
"""


def ring(lane: str) -> str:
    return f"{PREFIX}{lane}:ring"


def lists(lane: str) -> str:
    return f"{PREFIX}{lane}:project:"


def count(lane: str) -> str:
    return f"{PREFIX}{lane}:chunks"


def waiting(client: redis.Redis, lane: str) -> int:
    """About how many chunks wait in `lane` (an estimate: for spreading retries, not for truth)."""
    return int(client.get(count(lane)) or 0)


def deposit(client: redis.Redis, lane: str, project: str, chunks: Sequence[Sequence[str]]) -> None:
    """Queue `project`'s chunks behind its earlier ones, and the project in the ring."""
    _deposit(client, lane, project, chunks, "RPUSH")


def give_back(client: redis.Redis, lane: str, project: str, chunk: Sequence[str]) -> None:
    """A withdrawn chunk that must wait: first of its project's when the project's turn comes again."""
    _deposit(client, lane, project, [chunk], "LPUSH")


def _deposit(client: redis.Redis, lane: str, project: str, chunks: Sequence[Sequence[str]], push: str) -> None:
    encoded = [json.dumps(list(chunk)) for chunk in chunks]
    client.eval(_DEPOSIT, 2, ring(lane), count(lane), lists(lane), project, KEEP_SECONDS, push, *encoded)


def withdraw(client: redis.Redis, lane: str) -> tuple[str, list[str]] | None:
    """The project whose turn it is and its chunk, or None when no project has one waiting."""
    taken = client.eval(_WITHDRAW, 2, ring(lane), count(lane), lists(lane), KEEP_SECONDS)
    return (taken[0].decode(), json.loads(taken[1])) if taken else None


class FairChunks:
    """A project's bulk chunks for one lane, published as the outbox publishes a Signature
    (app.db.publish): the chunks go to Redis first, then one `token` per chunk to the lane.
    Chunks given back (`ahead`) go before the project's others.

    With `spare`, for the sweeper's copies of rows whose worker died, every chunk already on
    the project's list gets a token too. The dead worker's tokens left their chunks there,
    as many as it held and merged into fewer copies, so the lane would hold more chunks than
    tokens: tokens take the lost chunks and the copies, which find their rows sent, and the
    chunks behind them would wait for STALLED_AFTER_SECONDS. A token left over finds
    nothing and does nothing."""

    def __init__(
        self,
        project: str,
        lane: str,
        token: Signature,
        chunks: Sequence[Sequence[str]],
        ahead: bool = False,
        spare: bool = False,
    ):
        self.project = project
        self.lane = lane
        self.token = token
        self.chunks = chunks
        self.ahead = ahead
        self.spare = spare
        self.task = token.task

    def apply_async(self, **options: Any) -> None:
        client = redis_for(current_settings().redis_url)
        tokens = len(self.chunks) + (client.llen(lists(self.lane) + self.project) if self.spare else 0)
        if self.ahead:
            for chunk in self.chunks:
                give_back(client, self.lane, self.project, chunk)
        else:
            deposit(client, self.lane, self.project, self.chunks)
        for _ in range(tokens):
            self.token.apply_async(**options)
