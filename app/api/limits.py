"""How the send routes document the limits they count against: headers of a 202, and the 429.

The limits themselves are taken inside the send's transaction (app/access/admission.py);
this only tells clients, in the OpenAPI spec, what to read and what to expect.
"""

from __future__ import annotations

from typing import Any

from flask_smorest.error_handler import ErrorSchema


def _integer(description: str) -> dict[str, Any]:
    return {"description": description, "schema": {"type": "integer"}}


# On every answer of a project route whose project has a rate limit (rate_limit_per_min), the 429 included.
RATE_LIMIT_HEADERS = {
    "RateLimit-Limit": _integer("Requests a minute the project may make (rate_limit_per_min)."),
    "RateLimit-Remaining": _integer("Requests left this minute."),
    "RateLimit-Reset": _integer("Seconds until the minute ends."),
}

RETRY_AFTER = {"Retry-After": _integer("Seconds until a retry can succeed (a quota: until it resets).")}

# On every 202 of a send whose project has the limit; a replay answers only `Idempotent-Replayed`.
SEND_HEADERS = {
    **RATE_LIMIT_HEADERS,
    "RateLimit-Messages-Limit": _integer("Messages a minute the project's sends may carry (messages_per_min)."),
    "RateLimit-Messages-Remaining": _integer("Messages left this minute; a batch counts each recipient."),
    "RateLimit-Messages-Reset": _integer("Seconds until the minute ends."),
    "X-Quota-Limit": _integer("The channel's daily quota (settings.daily_quota)."),
    "X-Quota-Remaining": _integer("Messages of the channel left today."),
    "X-Quota-Reset": _integer("Seconds until midnight in settings.quota_timezone, when the quota resets."),
    "X-Storage-Quota-Limit": _integer(
        "Bytes of words and files the key's kind (live or test) may store a day (settings.daily_storage_bytes)."
    ),
    "X-Storage-Quota-Remaining": _integer("Bytes left today: a send's words count once per message, its files once."),
    "X-Storage-Quota-Reset": _integer("Seconds until midnight in settings.quota_timezone, when the bytes reset."),
    "Idempotent-Replayed": {
        "description": "`true` when this is the original answer to an earlier request with the same Idempotency-Key "
        "and body: nothing was sent again.",
        "schema": {"type": "string", "enum": ["true"]},
    },
}

LIMIT_REACHED: dict[str, Any] = {
    "schema": ErrorSchema,
    "description": "A limit has no room for the send, and nothing was written: requests a minute, messages a "
    "minute (a batch counts each recipient and is refused whole), the channel's daily quota (which says how "
    "many remain), or the bytes the key's kind may store a day (`daily_storage_bytes`; a send larger than a whole "
    "day's is a 413 instead). Retry after `Retry-After` seconds; the limit's own headers come with it.",
    "headers": {**RETRY_AFTER, **RATE_LIMIT_HEADERS},
    "example": {
        "code": 429,
        "status": "Too Many Requests",
        "message": "The project's daily email quota has 3 of 250000 left until 2030-01-02T00:00:00Z; this send has 10.",
        "errors": {
            "daily_quota": {
                "channel": "email",
                "limit": 250000,
                "used": 249997,
                "remaining": 3,
                "requested": 10,
                "resets_at": "2030-01-02T00:00:00Z",
            }
        },
    },
}
