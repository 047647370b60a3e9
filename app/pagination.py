"""Cursor pagination: the cursor is the sort key of the last item, opaque to clients.

Keyset pagination instead of OFFSET: page 1,000 costs what page 1 does, and rows added
meanwhile neither repeat nor vanish.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Any

from marshmallow import Schema, fields, validate

from app.errors import field_error

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


class PageArgsSchema(Schema):
    cursor = fields.String(metadata={"description": "next_cursor of the previous page."})
    limit = fields.Integer(load_default=DEFAULT_LIMIT, validate=validate.Range(1, MAX_LIMIT))


def page_schema(item: type[Schema], name: str) -> type[Schema]:
    """`{"items": [...], "next_cursor": "…" | null}` for one kind of item."""
    return Schema.from_dict(
        {"items": fields.List(fields.Nested(item)), "next_cursor": fields.String(allow_none=True)}, name=name
    )


def encode_cursor(key: Sequence[str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, parts: int) -> list[str] | None:
    """The sort key a cursor carries; a cursor we did not make is a 422."""
    if cursor is None:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError):
        key = None
    if not (isinstance(key, list) and len(key) == parts and all(isinstance(k, str) for k in key)):
        field_error(422, "Invalid request.", "query", "cursor", "Not a cursor this list gave out.")
    return key


def page(rows: Sequence[Any], limit: int, key: Callable[[Any], Sequence[str]]) -> dict[str, Any]:
    """Rows fetched with `limit + 1` → one page and the cursor to the next, if any."""
    items = list(rows[:limit])
    more = len(rows) > limit
    return {"items": items, "next_cursor": encode_cursor(key(items[-1])) if more else None}
