"""The Idempotency-Key header, read and answered the same way by every route that takes it."""

from __future__ import annotations

from typing import Any

from flask import request

from app.api.blueprint import Blueprint
from app.errors import field_error
from app.services.messages import Accepted

HEADER = "Idempotency-Key"
MAX_KEY = 255

# How the routes that call `key_from_request` document the header.
documented = Blueprint.doc(
    parameters=[
        {
            "in": "header",
            "name": HEADER,
            "required": False,
            "description": "Any string of yours naming this request, such as `order-17-confirmation`. A retry with "
            "the same key and the same body is answered with the original answer (and `Idempotent-Replayed: true`) "
            "instead of sending again; the same key with another body is a 409.",
            "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY},
            "example": "order-17-confirmation",
        }
    ]
)


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
