"""What one sandboxed operation may make, worked out before Python makes it.

Python builds a string, a list or an integer in one C call that no hook can interrupt:
`"a" * n`, `s.replace("a", long)`, `sep.join(items)`, `x ** y` and `str(a_list)` allocate
and compute at full speed before any check on their result could run. So the sandbox
works out from the operands how big the result would be, in time linear in the operands
and without allocating it, and refuses before the call:

- a string, list or dict is at most MAX_OUTPUT characters or items, and a container is
  measured by how long it prints (a list holding one long string a thousand times is long);
- an integer is at most MAX_INT_BITS bits, operands and results alike, so no operator on
  integers costs more than microseconds and `(10**1000)**1000` is refused, not computed;
- `sum` adds numbers only: adding lists one by one copies them quadratically.

Every value a hook returns also counts against the render's budget (app.content.budget).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jinja2 import filters, pass_environment, pass_eval_context
from jinja2.environment import Environment
from jinja2.nodes import EvalContext
from jinja2.sandbox import SecurityError

from app.content import budget

MAX_OUTPUT = 256 * 1024
MAX_INT_BITS = 4096

TOO_LONG = f"the template makes a value of more than {MAX_OUTPUT} characters"
TOO_BIG_INTEGER = f"the template makes an integer of more than {MAX_INT_BITS} bits"

# Built-in filters that take a container as a container; every other filter prints its value.
CONTAINER_FILTERS = frozenset(
    {
        "abs", "attr", "batch", "count", "d", "default", "dictsort", "filesizeformat", "first", "float",
        "groupby", "int", "items", "join", "last", "length", "list", "map", "max", "min", "random",
        "reject", "rejectattr", "reverse", "round", "select", "selectattr", "slice", "sort", "sum", "unique",
    }
)  # fmt: skip


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float)


def check_length(size: int) -> None:
    """Refuse what would be longer than MAX_OUTPUT characters or items."""
    if size > MAX_OUTPUT:
        raise SecurityError(TOO_LONG)


def printed_size(value: Any, limit: int = MAX_OUTPUT) -> int:
    """About how long `str(value)` is, found without building it; the count stops past `limit`.

    A container costs at least one character per item (the separators) besides what its
    items print, so the walk does work in proportion to the size it has counted: it ends
    after about `limit` steps even for a list that contains itself.
    """
    total = 0
    pending = [value]
    while pending and total <= limit:
        item = pending.pop()
        if isinstance(item, str | bytes):
            total += len(item)
        elif isinstance(item, Mapping):
            total += len(item) + 2
            if total <= limit:
                pending.extend(item.keys())
                pending.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            total += len(item) + 2
            if total <= limit:
                pending.extend(item)
        elif is_integer(item):
            total += item.bit_length() // 3 + 1
        else:
            total += 1
    return total


def checked_value(value: Any) -> Any:
    """A value a call, filter or operator made: within the caps, and counted as built."""
    if isinstance(value, str | bytes | list | tuple | dict):
        check_length(len(value))
        budget.build(len(value))
    elif is_integer(value) and value.bit_length() > MAX_INT_BITS:
        raise SecurityError(TOO_BIG_INTEGER)
    else:
        budget.tick()
    return value


def check_arguments(args: Iterable[Any], kwargs: Mapping[str, Any]) -> None:
    """Numeric arguments are widths and counts at most: one above MAX_OUTPUT only allocates."""
    for value in (*args, *kwargs.values()):
        if is_integer(value) and abs(value) > MAX_OUTPUT:
            raise SecurityError(f"an argument larger than {MAX_OUTPUT} is not allowed")


def check_operands(operator: str, left: Any, right: Any) -> None:
    """Refuse an arithmetic operator whose operands, or whose result, would be too big to make."""
    if any(is_integer(operand) and operand.bit_length() > MAX_INT_BITS for operand in (left, right)):
        raise SecurityError(TOO_BIG_INTEGER)
    if operator == "**" and _power_too_big(left, right):
        raise SecurityError(f"{TOO_BIG_INTEGER} (a power too large)")
    if operator == "*":
        sequence, count = (left, right) if is_integer(right) else (right, left)
        if isinstance(sequence, str | bytes | list | tuple) and is_integer(count) and count > 0:
            check_length(printed_size(sequence) * count)


def checked_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A built-in filter with its numeric arguments checked, what it would print (its value
    and arguments, unless it takes containers as containers) measured first, and its result
    checked and counted."""
    at = 1 if getattr(function, "jinja_pass_arg", None) else 0
    prints = name not in CONTAINER_FILTERS

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        check_arguments(args[at + 1 :], kwargs)
        if prints:
            for value in (*args[at:], *kwargs.values()):
                if not isinstance(value, str):
                    check_length(printed_size(value))
        return checked_value(function(*args, **kwargs))

    return checked


def _power_too_big(base: Any, exponent: Any) -> bool:
    """`base ** exponent` has about exponent·log2|base| bits: known before it is computed."""
    if not (is_integer(base) and is_integer(exponent)) or exponent <= 0 or abs(base) <= 1:
        return False
    return exponent > MAX_INT_BITS or exponent * math.log2(abs(base)) > MAX_INT_BITS


def printable(value: Any) -> Any:
    """`{{ value }}` (the environment's finalize): refused before printing a container that
    would print longer than the cap."""
    if not isinstance(value, str):
        check_length(printed_size(value))
    budget.tick()
    return value


# -- sizes of what string-building operations would make; filters and methods share them


def replaced_size(s: str | bytes, old: Any, new: Any, count: int = -1, /) -> int:
    found = s.count(old) if old else len(s) + 1
    if count >= 0:
        found = min(found, count)
    return len(s) + found * max(len(new) - len(old), 0)


def padded_size(s: str | bytes, width: int, *_: Any) -> int:
    """center, ljust, rjust, zfill."""
    return max(len(s), width)


def expanded_size(s: str | bytes, tabsize: int = 8) -> int:
    tabs = s.count("\t") if isinstance(s, str) else s.count(b"\t")
    return len(s) + tabs * max(tabsize - 1, 0)


def translated_size(s: str | bytes, table: Any, *_: Any) -> int:
    """Each character becomes at most the longest string the table maps one to."""
    if isinstance(s, bytes) or not isinstance(table, Mapping | list | tuple):
        return len(s)
    values = table.values() if isinstance(table, Mapping) else table
    return len(s) * max((len(v) for v in values if isinstance(v, str)), default=1)


def joined_size(separator: str | bytes, items: list[Any]) -> int:
    total = len(separator) * max(len(items) - 1, 0)
    for item in items:
        if total > MAX_OUTPUT:
            break
        total += printed_size(item, MAX_OUTPUT - total)
    return total


def indented_size(s: str, width: int | str = 4, *_: Any) -> int:
    """Every line may gain the indentation."""
    indentation = len(width) if isinstance(width, str) else width
    return len(s) + (len(s.splitlines()) + 1) * max(indentation, 0)


def wrapped_size(s: str, width: int, wrapstring: str) -> int:
    """Two lines in a row hold at least `width` characters of `s`, so a paragraph has at
    most 2·len/width + 1 lines, each ended by `wrapstring`."""
    lines = 2 * len(s) // max(width, 1) + len(s.splitlines()) + 1
    return len(s) + lines * len(wrapstring)


# -- str, bytes and list methods the sandbox calls in a checked version instead


def _checked_method(name: str, size: Callable[..., int]) -> Callable[..., Any]:
    def call(owner: Any, *args: Any, **kwargs: Any) -> Any:
        check_length(size(owner, *args, **kwargs))
        return getattr(owner, name)(*args, **kwargs)

    return call


def _join(separator: str | bytes, iterable: Iterable[Any], /) -> Any:
    items = list(iterable)
    check_length(joined_size(separator, items))
    return separator.join(items)


def _extend(owner: list[Any], iterable: Iterable[Any], /) -> None:
    items = list(iterable)  # before growing: `l.extend(l|select)` would chase its own tail
    check_length(len(owner) + len(items))
    owner.extend(items)


STRING_METHODS: Mapping[str, Callable[..., Any]] = {
    "replace": _checked_method("replace", replaced_size),
    "expandtabs": _checked_method("expandtabs", expanded_size),
    "center": _checked_method("center", padded_size),
    "ljust": _checked_method("ljust", padded_size),
    "rjust": _checked_method("rjust", padded_size),
    "zfill": _checked_method("zfill", padded_size),
    "translate": _checked_method("translate", translated_size),
    "join": _join,
}
LIST_METHODS: Mapping[str, Callable[..., Any]] = {"extend": _extend}


def method_guard(function: Any) -> Callable[..., Any] | None:
    """The checked version of a bound str, bytes or list method that can build a big value,
    called with the method's owner first; None for any other callable."""
    owner = getattr(function, "__self__", None)
    name = getattr(function, "__name__", "")
    if isinstance(owner, str | bytes):
        return STRING_METHODS.get(name)
    if isinstance(owner, list):
        return LIST_METHODS.get(name)
    return None


# -- built-in filters that can build a big value, checked first


@pass_eval_context
def _replace_filter(eval_ctx: EvalContext, s: Any, old: Any, new: Any, count: int | None = None) -> str:
    check_length(replaced_size(str(s), str(old), str(new), -1 if count is None else count))
    return filters.do_replace(eval_ctx, s, old, new, count)


def _center_filter(value: Any, width: int = 80) -> str:
    check_length(padded_size(str(value), width))
    return filters.do_center(value, width)


def _indent_filter(s: Any, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    check_length(indented_size(str(s), width))
    return filters.do_indent(s, width, first, blank)


@pass_environment
def _wordwrap_filter(
    environment: Environment,
    s: Any,
    width: int = 79,
    break_long_words: bool = True,
    wrapstring: str | None = None,
    break_on_hyphens: bool = True,
) -> str:
    check_length(wrapped_size(str(s), width, wrapstring or environment.newline_sequence))
    return filters.do_wordwrap(environment, s, width, break_long_words, wrapstring, break_on_hyphens)


def _items(environment: Environment, value: Iterable[Any], attribute: str | int | None) -> list[Any]:
    """A filter's sequence read once into a list (of one attribute of each item when given)."""
    if attribute is not None:
        value = map(filters.make_attrgetter(environment, attribute), value)
    return list(value)


@pass_eval_context
def _join_filter(eval_ctx: EvalContext, value: Iterable[Any], d: str = "", attribute: str | int | None = None) -> str:
    items = _items(eval_ctx.environment, value, attribute)
    check_length(joined_size(str(d), items))
    return filters.sync_do_join(eval_ctx, items, d)


@pass_environment
def _sum_filter(
    environment: Environment, iterable: Iterable[Any], attribute: str | int | None = None, start: Any = 0
) -> Any:
    items = _items(environment, iterable, attribute)
    if not all(is_number(item) for item in (start, *items)):
        raise SecurityError("sum adds numbers only; join strings with join")
    return sum(items, start)


CHECKED_FILTERS: Mapping[str, Callable[..., Any]] = {
    "replace": _replace_filter,
    "center": _center_filter,
    "indent": _indent_filter,
    "wordwrap": _wordwrap_filter,
    "join": _join_filter,
    "sum": _sum_filter,
}
