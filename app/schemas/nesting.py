"""How deep a caller's JSON objects and lists may nest: data, metadata, a subscriber's data.

Python's JSON, repr and our own walkers recurse, so a value 900 levels deep failed a
workflow trigger with a 500 and could fail the task that reads it; the JSON parser refuses
only past about 990. Every field that takes free-form data is bounded here, at save.
"""

from __future__ import annotations

from typing import Any

from marshmallow import ValidationError, fields

MAX_DATA_DEPTH = 32
TOO_DEEP = f"Objects and lists nested at most {MAX_DATA_DEPTH} deep."


def nesting(value: Any) -> int:
    """How deep objects and lists nest in a parsed JSON value, walked with a stack of its own;
    past MAX_DATA_DEPTH it stops counting, so a deep value costs no more than a shallow one."""
    deepest, pending = 0, [(value, 1)]
    while pending and deepest <= MAX_DATA_DEPTH:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in children)
    return deepest


def shallow(value: Any) -> None:
    """A validator: no deeper than MAX_DATA_DEPTH."""
    if nesting(value) > MAX_DATA_DEPTH:
        raise ValidationError(TOO_DEEP)


class Data(fields.Dict):
    """A free-form object with string keys, nested at most MAX_DATA_DEPTH deep."""

    def __init__(self, **kwargs: Any):
        super().__init__(keys=fields.String(), **kwargs)
        self.validators.append(shallow)
