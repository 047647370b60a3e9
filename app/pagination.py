"""Cursor pagination: the cursor is the sort key of the last item, opaque to clients.

Keyset pagination instead of OFFSET: page 1,000 costs what page 1 does, and rows added
meanwhile neither repeat nor vanish.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from marshmallow import Schema, fields, validate

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


class InvalidCursor(ValueError):
    """A cursor this list did not give out: the caller's mistake, answered 400 by the API."""


def aware_time(text: str) -> datetime:
    """A cursor's timestamp, with its zone as every cursor we make has one."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError("no time zone")
    return moment


def decode_cursor(cursor: str | None, *parts: Callable[[str], Any]) -> tuple[Any, ...] | None:
    """The sort key a cursor carries, each part read by its reader (`str`, `aware_time`,
    `uuid.UUID`, an enum), so what reaches the query is what the list gave out."""
    if cursor is None:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not (isinstance(key, list) and len(key) == len(parts) and all(isinstance(k, str) for k in key)):
            raise ValueError("not a list of strings")
        if any("\x00" in k for k in key):
            raise ValueError("a NUL character")
        return tuple(read(k) for read, k in zip(parts, key, strict=True))
    except (binascii.Error, ValueError, RecursionError) as error:
        raise InvalidCursor("Not a cursor this list gave out.") from error


def page(rows: Sequence[Any], limit: int, key: Callable[[Any], Sequence[str]]) -> dict[str, Any]:
    """Rows fetched with `limit + 1` → one page and the cursor to the next, if any."""
    items = list(rows[:limit])
    more = len(rows) > limit
    return {"items": items, "next_cursor": encode_cursor(key(items[-1])) if more else None}
