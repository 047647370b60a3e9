"""What a send must fit before it is written: the project's messages a minute, its daily
quota, and the bytes its sends may store a day.

Services call `admit` inside the transaction that writes the messages, once they know how
many there are. Both limits are taken there and then: the minute's as it stands, the day's
exactly (app/access/quota.py). What was taken is given back if the transaction rolls back
(a refusal, a failed write), and a quota PostgreSQL decided reaches Redis once it commits.
Services admit a send only once they know it is no idempotent replay, so a replay is never
counted, nor refused.

Test keys count against the minute (the API's load is the same) but not against the daily
quota, which is about what providers are paid for. Both kinds store words and files in the
one shared PostgreSQL, so each kind's sends have a daily storage bound of their own (test
keys a small one): the same quota mechanism, counting bytes (app/access/storage.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

from sqlalchemy import event
from sqlalchemy.orm import Session

from app.access.auth import Caller
from app.access.quota import Ask, DailyQuota, Meter, Taken, messages_of, storage_of
from app.access.ratelimit import MessageRateLimiter, MessageVerdict
from app.access.refusals import LimitReached, LimitTooSmall
from app.config import current_settings
from app.enums import Channel
from app.redis_client import redis_for

MESSAGE_HEADERS = "RateLimit-Messages"
STORAGE_HEADERS = "X-Storage-Quota"


def admit(
    session: Session, caller: Caller, channel: Channel, count: int, written: bool = False, *, stored: int = 0
) -> dict[str, str]:
    """Take `count` messages of `channel`, storing `stored` bytes, from the caller's limits, or
    raise LimitReached (a 429; LimitTooSmall, a 413, for a send larger than a whole day's
    storage) having taken nothing; the headers that tell the client where it stands.

    `written`: the transaction has inserted the messages already (a single send, which
    learns it is no replay from its insert), so its own count of the day includes them.
    """
    limits = caller.limits
    headers: dict[str, str] = {}
    if limits.messages_per_min is not None:
        minute = _limiters().messages.take(caller.project_id, count, limits.messages_per_min)
        if minute is not None:
            headers.update(minute.headers(MESSAGE_HEADERS))
            if not minute.allowed:
                raise _message_limit_reached(minute, headers)
            _on_rollback(session, partial(_limiters().messages.give_back, minute))
    quota = limits.quota_for(channel)
    if quota is not None and not caller.is_test:
        taken = _take_daily(session, caller, messages_of(channel), quota, count, written)
        headers.update(taken.headers())
        if not taken.allowed:
            raise _quota_reached(taken, channel, headers)
    storage = limits.storage_for(caller.is_test)
    if storage is not None and stored > 0:
        if stored > storage:
            raise _storage_too_small(caller, storage, stored)
        taken = _take_daily(session, caller, storage_of(caller.is_test), storage, stored, written)
        headers.update(taken.headers(STORAGE_HEADERS))
        if not taken.allowed:
            raise _storage_reached(caller, taken, headers)
    return headers


def _take_daily(session: Session, caller: Caller, meter: Meter, limit: int, count: int, written: bool) -> Taken:
    """Take from one daily quota; what is taken is given back should the transaction roll back."""
    ask = Ask(caller.project_id, meter, limit, caller.limits.quota_timezone, count, written)
    taken = _limiters().quota.take(session, ask)
    if taken.give_back is not None:  # a refusal took nothing, so has nothing to give back or publish
        _on_rollback(session, taken.give_back)
    if taken.publish is not None:
        session.info.setdefault("admission_after_commit", []).append(taken.publish)
    return taken


def daily_quota() -> DailyQuota:
    """This process's daily quota (whose clock tests may set)."""
    return _limiters().quota


def _message_limit_reached(minute: MessageVerdict, headers: dict[str, str]) -> LimitReached:
    if minute.requested > minute.limit:
        message = f"{minute.requested} messages can never fit the project's {minute.limit} a minute: split the send."
    else:
        message = f"The project's message limit has {minute.remaining} of {minute.limit} left this minute."
    errors = {"limit": minute.limit, "remaining": minute.remaining, "requested": minute.requested}
    return LimitReached(message, {"messages_per_min": errors}, headers)


def _quota_reached(taken: Taken, channel: Channel, headers: dict[str, str]) -> LimitReached:
    resets_at = _instant(taken)
    message = (
        f"The project's daily {channel} quota has {taken.remaining} of {taken.limit} left until {resets_at}; "
        f"this send has {taken.requested}."
    )
    errors = {
        "channel": channel.value,
        "limit": taken.limit,
        "used": taken.used,
        "remaining": taken.remaining,
        "requested": taken.requested,
        "resets_at": resets_at,
    }
    return LimitReached(message, {"daily_quota": errors}, headers)


def _storage_reached(caller: Caller, taken: Taken, headers: dict[str, str]) -> LimitReached:
    kind = _kind(caller)
    resets_at = _instant(taken)
    message = (
        f"The project's {kind} keys may store {taken.limit} bytes of words and files a day: {taken.remaining} "
        f"are left until {resets_at}, and this send stores {taken.requested}."
    )
    errors = {
        "kind": kind,
        "limit": taken.limit,
        "used": taken.used,
        "remaining": taken.remaining,
        "requested": taken.requested,
        "resets_at": resets_at,
    }
    return LimitReached(message, {"daily_storage_bytes": errors}, headers)


def _storage_too_small(caller: Caller, limit: int, stored: int) -> LimitTooSmall:
    kind = _kind(caller)
    message = (
        f"This send stores {stored} bytes of words and files, more than the {limit} a day the project's "
        f"{kind} keys may store: make it smaller (fewer recipients, smaller files)."
    )
    return LimitTooSmall(message, {"daily_storage_bytes": {"kind": kind, "limit": limit, "requested": stored}})


def _kind(caller: Caller) -> str:
    return "test" if caller.is_test else "live"


def _instant(taken: Taken) -> str:
    """When the quota's day ends, as the API writes times."""
    return taken.day.end.isoformat().replace("+00:00", "Z")


def _on_rollback(session: Session, put_back: Callable[[], None]) -> None:
    session.info.setdefault("admission_on_rollback", []).append(put_back)


@event.listens_for(Session, "after_commit")
def _committed(session: Session) -> None:
    session.info.pop("admission_on_rollback", None)
    for publish in session.info.pop("admission_after_commit", []):
        publish()


@event.listens_for(Session, "after_rollback")
def _rolled_back(session: Session) -> None:
    session.info.pop("admission_after_commit", None)
    for put_back in session.info.pop("admission_on_rollback", []):
        put_back()


class _Limiters:
    def __init__(self) -> None:
        client = redis_for(current_settings().redis_url)
        self.messages = MessageRateLimiter(client)
        self.quota = DailyQuota(client)


_limiters_lock = threading.Lock()
_process_limiters: _Limiters | None = None


def _limiters() -> _Limiters:
    """Built on first use from the process's settings, as the coalescer is."""
    global _process_limiters
    with _limiters_lock:
        if _process_limiters is None:
            _process_limiters = _Limiters()
        return _process_limiters
