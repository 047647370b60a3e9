"""Bulk work taken in turn per project: one project's campaign never holds another's send behind it.

A broker queue is first in, first out: a 500,000-message campaign queued as 1,000 prepare
tasks would make a 200-message bulk send of another project wait for all of them. So a
bulk batch's chunks are not put in the broker: each goes on its project's list in Redis,
the project joins a ring of projects with work waiting, and the broker gets a token (the
task `tidings.prepare_next`) per chunk. A worker running a token takes the chunk of the
project at the head of the ring, which goes to the back if it has more. The broker still
says how much work there is and who may do it (lanes, priorities, prefetch); Redis says
in which order.

Nothing here is the truth: the ids are accepted rows in PostgreSQL. A chunk lost with
Redis, or whose worker died, is re-dispatched by the sweeper like any lost task; a token
that finds nothing does nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis
from celery.canvas import Signature

from app.config import current_settings
from app.delivery.broker import celery_app
from app.delivery.queues import prepare_queue
from app.redis_client import redis_for

PREFIX = "tidings:fair:"
# Lists and rings of a lane idle this long go; a busy lane refreshes them at every chunk.
KEEP_SECONDS = 24 * 3600

# KEYS: the ring. ARGV: prefix of the projects' lists, the project, TTL, then the chunks.
_DEPOSIT = """
local list = ARGV[1] .. ARGV[2]
for i = 4, #ARGV do redis.call('RPUSH', list, ARGV[i]) end
redis.call('EXPIRE', list, ARGV[3])
if redis.call('LPOS', KEYS[1], ARGV[2]) == false then redis.call('RPUSH', KEYS[1], ARGV[2]) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
"""
# KEYS: the ring. ARGV: prefix of the projects' lists. The head's next chunk; the head goes
# to the back while it has more, and leaves the ring when it has none.
_WITHDRAW = """
for _ = 1, redis.call('LLEN', KEYS[1]) do
  local project = redis.call('LPOP', KEYS[1])
  local chunk = redis.call('LPOP', ARGV[1] .. project)
  if chunk then
    if redis.call('LLEN', ARGV[1] .. project) > 0 then redis.call('RPUSH', KEYS[1], project) end
    return chunk
  end
end
return false
"""


def ring(lane: str) -> str:
    return f"{PREFIX}{lane}:ring"


def lists(lane: str) -> str:
    return f"{PREFIX}{lane}:project:"


def deposit(client: redis.Redis, lane: str, project: str, chunks: Sequence[Sequence[str]]) -> None:
    """Queue `project`'s chunks behind its earlier ones, and the project in the ring."""
    encoded = [json.dumps(list(chunk)) for chunk in chunks]
    client.eval(_DEPOSIT, 1, ring(lane), lists(lane), project, KEEP_SECONDS, *encoded)


def withdraw(client: redis.Redis, lane: str) -> list[str] | None:
    """The chunk whose turn it is, or None when no project has one waiting."""
    chunk = client.eval(_WITHDRAW, 1, ring(lane), lists(lane))
    return json.loads(chunk) if chunk else None


class FairChunks:
    """A project's bulk chunks, published as the outbox publishes a Signature (app.db.publish):
    the chunks go to Redis first, then one `tidings.prepare_next` token per chunk."""

    def __init__(self, project: str, priority: str, chunks: Sequence[Sequence[str]]):
        self.project = project
        self.priority = priority
        self.chunks = chunks
        self.task = "tidings.prepare_next"

    def tokens(self) -> list[Signature]:
        queue = prepare_queue(self.priority)
        return [celery_app.signature(self.task, args=(self.priority,), queue=queue) for _ in self.chunks]

    def apply_async(self, **options: Any) -> None:
        deposit(redis_for(current_settings().redis_url), prepare_queue(self.priority), self.project, self.chunks)
        for token in self.tokens():
            token.apply_async(**options)
