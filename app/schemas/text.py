"""What any string from outside may hold: no control characters, and one line where it becomes a header.

PostgreSQL refuses NUL in text and jsonb, so a string holding one is a 500 at the API or a
worker batch that fails again on every retry; the other C0 control characters have no place
in a notification either (tab, line feed and carriage return do). A value that ends up in a
header line (a subject, an address) must also be one line: `"a\\r\\nBcc: x@evil.example"`
would add a header of the caller's choosing.
"""

from __future__ import annotations

import re
from typing import Any

from marshmallow import fields

CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
# How a JSON text writes the characters CONTROL finds: strict JSON (Python's parser) refuses
# them raw, so an escape is the only way in. A superset (it also matches \u000a, or an escaped
# backslash before a b), good for skipping the walk on the bodies that have none.
CONTROL_ESCAPE = re.compile(rb"\\(?:[bf]|u00[01])")
LINE_BREAK = "Must be one line: no carriage return, line feed or other line break."
# Line breaks beyond CR and LF that str.splitlines, and so Python's email library, honours;
# the C0 ones among them (VT, FF, FS, GS, RS) are control characters, refused everywhere.
UNICODE_LINE_BREAKS = "\x85\u2028\u2029"
ONE_LINE = re.compile(f"[\r\n{UNICODE_LINE_BREAKS}]")


def control_problem(text: str) -> str | None:
    """Why `text` cannot be stored as given, or None when it can."""
    found = CONTROL.search(text)
    if found is None:
        return None
    return f"Contains control character U+{ord(found.group()):04X}; only tab, line feed and carriage return may appear."


def control_characters(document: Any, raw: bytes) -> dict[Any, Any]:
    """Field errors, nested as a schema's are, for each string or key of a parsed JSON body
    (`raw` as sent) that holds a control character; empty when there is none.

    One check for every route, before any schema sees the body. Most bodies contain no escape
    that could be one, and a 10,000-row batch is then skipped in well under a millisecond
    instead of walked in about 20. The walk keeps its own stack, since a body may be nested as
    deep as the JSON parser allows; it visits every value once.
    """
    errors: dict[Any, Any] = {}
    if CONTROL_ESCAPE.search(raw) is None:
        return errors
    pending: list[tuple[tuple[Any, ...], Any]] = [((), document)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, str):
            if problem := control_problem(value):
                put_error(errors, path or ("_schema",), problem)
        elif isinstance(value, dict):
            for key, item in value.items():
                if problem := control_problem(key):
                    put_error(errors, (*path, key), problem)
                else:
                    pending.append(((*path, key), item))
        elif isinstance(value, list):
            pending.extend(((*path, index), item) for index, item in enumerate(value))
    return errors


def put_error(errors: dict[Any, Any], path: tuple[Any, ...], problem: str) -> None:
    """`problem` at `path` in nested errors: {"content": {"subject": [problem]}}."""
    node = errors
    for step in path[:-1]:
        node = node.setdefault(step, {})
    node[path[-1]] = [problem]


class HeaderText(fields.String):
    """A string that becomes (part of) a header line, or a request line: line breaks are refused.

    The one type for subjects, addresses and push tokens; `HeaderEmail` and `HeaderUrl` add
    their shape checks to it.
    """

    default_error_messages = {"line_break": LINE_BREAK}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        text = super()._deserialize(value, attr, data, **kwargs)
        if ONE_LINE.search(text):
            raise self.make_error("line_break")
        return text


class HeaderEmail(HeaderText, fields.Email):
    """An email address, one line."""


class HeaderUrl(HeaderText, fields.Url):
    """A URL, one line."""


def webhook_url(**kwargs: Any) -> HeaderUrl:
    """Where a webhook goes (a message, or an endpoint's events): an http(s) URL, one line, no TLD needed."""
    return HeaderUrl(schemes={"http", "https"}, require_tld=False, **kwargs)
