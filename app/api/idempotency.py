"""The Idempotency-Key header, read and answered the same way by every route that takes it."""

from __future__ import annotations

from typing import Any

from flask import request

from app.errors import field_error
from app.services.messages import Accepted

HEADER = "Idempotency-Key"
MAX_KEY = 255


def key_from_request() -> str | None:
    """The request's Idempotency-Key, if any; 422 when it is empty or over 255 characters."""
    key = request.headers.get(HEADER)
    if key is not None and not 1 <= len(key) <= MAX_KEY:
        field_error(422, "Invalid request.", "headers", HEADER, "Use 1 to 255 characters.")
    return key


def guarded_body(key: str | None) -> Any:
    """The JSON body as sent, which a replay must match; None without a key.

    The schema already parsed the body, into values a fingerprint cannot use; parsing it
    again costs about 8 ms for a batch of 5,000, so it is done only when a key needs it.
    """
    return request.get_json() if key is not None else None


def answer(accepted: Accepted) -> tuple[dict[str, Any], int, dict[str, str]]:
    """202 with the body and the limits' headers; a replay says so in a header, its body being the original one."""
    headers = {"Idempotent-Replayed": "true"} if accepted.replayed else dict(accepted.headers)
    return accepted.body, 202, headers
