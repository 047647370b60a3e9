"""Work taken in turn per project: one project's flood never holds another's sends behind it.

A broker queue is first in, first out: a 500,000-message campaign queued as 1,000 tasks
would make a 200-message send of another project wait for all of them, and 4,000
"transactional" messages of one project would hold another's password resets behind them.
Prepare is fast, so its lane would only make B wait seconds; a provider that allows 14
messages a second would make it wait ten hours in the deliver lane. So in every lane, bulk
and transactional, a project's chunk is not put in the broker: it goes on its project's
list in Redis, the project joins the lane's ring of projects with work waiting, and the
broker gets tokens (`tidings.prepare_next`, `tidings.deliver_next`). A worker running a
token takes up to a task's worth of ids from the projects in the ring in turn, an equal
share of ids each (work-conserving: a project alone gets the whole task, one with fewer
waiting leaves the rest to the others, and the ids of many projects still share one task).
A share counts ids, not chunks: a project's single sends are a chunk of one id each, and a
chunk each per turn gave them one id of every grant of a paced provider beside a flood's
hundreds, so they waited behind it as long as first in, first out would have. The broker
still says how much work there is and who may do it (lanes, priorities, prefetch); Redis
says in which order. What the provider's pace did not admit goes back to the head of its
project's list (`give_back`), behind the others' turn, so the projects waiting on a paced
provider share its grants in turn.

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
from app.observability import logs
from app.redis_client import redis_for

PREFIX = "tidings:fair:"
# Lists, rings and counts of a lane idle this long go; a busy lane refreshes them at every chunk.
KEEP_SECONDS = 24 * 3600

# KEYS: the ring, the lane's count of chunks. ARGV: prefix of the projects' lists, TTL, RPUSH
# (behind each project's other chunks) or LPUSH (ahead of them), then (project, chunk) pairs.
_DEPOSIT = """
for i = 4, #ARGV, 2 do
  local list = ARGV[1] .. ARGV[i]
  redis.call(ARGV[3], list, ARGV[i + 1])
  redis.call('EXPIRE', list, ARGV[2])
  if redis.call('LPOS', KEYS[1], ARGV[i]) == false then redis.call('RPUSH', KEYS[1], ARGV[i]) end
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('INCRBY', KEYS[2], (#ARGV - 3) / 2)
redis.call('EXPIRE', KEYS[2], ARGV[2])
"""
# KEYS: the ring, the lane's count of chunks. ARGV: prefix of the projects' lists, TTL, how many
# ids to take. Turn after turn, the head of the ring takes its share of what is left to take
# (an equal part for each project in the ring), from as many of its chunks as the share
# holds: the part of a chunk that does not fit stays first of its list. It goes to the back
# while it has more; a project with none leaves the ring. A share counts ids, not chunks, so
# a project of single sends (a chunk each) gets as many ids as a flood's 500-id chunks give.
# Ends when the ids are taken or no project has any: each turn takes an id or drops a
# project, so there are at most size + the ring's length turns, and each chunk a turn pops
# gives it an id. A lane at work keeps its keys alive, however long a campaign takes.
_WITHDRAW = """
local budget = tonumber(ARGV[3])
local taken = {}
for _ = 1, budget + redis.call('LLEN', KEYS[1]) do
  if budget <= 0 then break end
  local project = redis.call('LPOP', KEYS[1])
  if not project then break end
  local list = ARGV[1] .. project
  local share = math.ceil(budget / (redis.call('LLEN', KEYS[1]) + 1))
  local ids = {}
  while #ids < share do
    local raw = redis.call('LPOP', list)
    if not raw then break end
    local chunk = cjson.decode(raw)
    local room = share - #ids
    if #chunk > room then
      local rest = {}
      for i = room + 1, #chunk do rest[#rest + 1] = chunk[i] end
      redis.call('LPUSH', list, cjson.encode(rest))
      for i = 1, room do ids[#ids + 1] = chunk[i] end
    else
      if redis.call('DECR', KEYS[2]) <= 0 then redis.call('DEL', KEYS[2]) end
      for i = 1, #chunk do ids[#ids + 1] = chunk[i] end
    end
  end
  if #ids > 0 then
    budget = budget - #ids
    taken[#taken + 1] = project
    taken[#taken + 1] = cjson.encode(ids)
  end
  if redis.call('LLEN', list) > 0 then
    redis.call('RPUSH', KEYS[1], project)
    redis.call('EXPIRE', list, ARGV[2])
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('EXPIRE', KEYS[2], ARGV[2]) end
return taken
"""

# KEYS: the ring. ARGV: prefix of the projects' lists. The chunks on the lists of its projects.
_CHUNKS = """
local n = 0
for _, project in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do n = n + redis.call('LLEN', ARGV[1] .. project) end
return n
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


def chunks_waiting(client: redis.Redis, lane: str) -> int:
    """How many chunks wait in `lane`, exactly (not the estimate `waiting` gives)."""
    return int(client.eval(_CHUNKS, 1, ring(lane), lists(lane)))


Pieces = Sequence[tuple[str, Sequence[str]]]


def deposit(client: redis.Redis, lane: str, pieces: Pieces) -> None:
    """Queue each (project, chunk) behind its project's earlier ones, and the projects in the ring."""
    _deposit(client, lane, pieces, "RPUSH")


def give_back(client: redis.Redis, lane: str, pieces: Pieces) -> None:
    """Withdrawn chunks that must wait: first of their project's when the project's turn comes again."""
    _deposit(client, lane, list(reversed(pieces)), "LPUSH")


def _deposit(client: redis.Redis, lane: str, pieces: Pieces, push: str) -> None:
    pairs = [part for project, chunk in pieces for part in (project, json.dumps(list(chunk)))]
    if pairs:
        client.eval(_DEPOSIT, 2, ring(lane), count(lane), lists(lane), KEEP_SECONDS, push, *pairs)


def withdraw(client: redis.Redis, lane: str, size: int) -> list[tuple[str, list[str]]]:
    """Up to `size` ids, taken from the projects with work waiting in turn, an equal share of
    ids each, as (project, ids) in the order taken; empty when no project has any.

    Work-conserving: a project alone takes the whole `size`, and several share it.
    """
    taken = client.eval(_WITHDRAW, 2, ring(lane), count(lane), lists(lane), KEEP_SECONDS, size)
    return [(taken[i].decode(), json.loads(taken[i + 1])) for i in range(0, len(taken), 2)]


def owners(taken: Sequence[tuple[str, Sequence[str]]]) -> dict[str, str]:
    """Withdrawn ids → their project, in the order taken. A lone id names the token's log
    lines, as a task that carries one id names its own (app/observability/logs.py)."""
    found = {message_id: project for project, ids in taken for message_id in ids}
    if len(found) == 1:
        logs.bind(message_id=next(iter(found)))
    return found


class FairChunks:
    """Projects' chunks for one lane, published as the outbox publishes a Signature
    (app.db.publish): the chunks go to Redis first, then `token`s to the lane, enough for a
    token that takes `size` ids each to take them all (a token takes up to `size` whatever the
    project, so a flush of many projects' few ids costs one token, not one per project).
    Chunks given back (`ahead`) go before their project's others."""

    def __init__(self, lane: str, token: Signature, pieces: Pieces, *, size: int, ahead: bool = False):
        self.lane = lane
        self.token = token
        self.pieces = pieces
        self.size = size
        self.ahead = ahead
        self.task = token.task

    @property
    def messages(self) -> int:
        return sum(len(chunk) for _, chunk in self.pieces)

    @property
    def tokens(self) -> int:
        """Tokens enough to take every chunk."""
        return -(-self.messages // self.size)

    def apply_async(self, **options: Any) -> None:
        client = redis_for(current_settings().redis_url)
        (give_back if self.ahead else deposit)(client, self.lane, self.pieces)
        for _ in range(self.tokens):
            self.token.apply_async(**options)
