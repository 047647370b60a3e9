"""A workflow's steps as a client writes them, checked, and compiled into what the engine runs.

A client writes each step as an object with one key, its kind:

    {"send": {"channel": "push", "template": "new-comment"}}
    {"delay": {"for": "10m"}}  or  {"delay": {"until": "{{ appointment_at }}", "offset": "-1h"}}
    {"branch": {"unless": {"was": "opened"}}}
    {"digest": {"window": "10m", "key": "{{ post_id }}"}}
    {"throttle": {"limit": 3, "window": "1d"}}

and the common fallback in one step, `{"send": {"channels": ["push", "sms"], "templates":
{...}, "fallback_after": "10m", "unless": "opened"}}`, which compiles to send, delay,
branch and send. Compiled steps are plain dicts with a `kind`, durations in seconds and
data references as key paths, so the engine never parses anything twice. Problems are
collected by step index in marshmallow's error shape, so a 422 names each one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from marshmallow import ValidationError

from app.enums import Channel, Priority
from app.schemas.audience import TEMPLATE_KEY
from app.workflows import conditions

MAX_STEPS = 20  # as a client writes them; a fallback of n channels compiles to 3n - 2
MAX_SECONDS = 30 * 24 * 3600  # the longest delay, digest window or throttle window
MAX_THROTTLE = 10_000
DURATION = re.compile(r"^(-?)(\d{1,7})(s|m|h|d)$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
REFERENCE = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]{0,63}(?:\.[A-Za-z_][A-Za-z0-9_]{0,63}){0,7})\s*\}\}$")
KINDS = ("send", "delay", "branch", "digest", "throttle")
ENGAGEMENTS = conditions.ENGAGEMENTS

Errors = dict[str, Any]


class Invalid(Exception):
    """The definition's problems, as {"<step index>": {"<kind>": {"<field>": [message]}}}."""

    def __init__(self, errors: Errors) -> None:
        super().__init__("invalid workflow")
        self.errors = errors


def compile_steps(steps: Any) -> list[dict[str, Any]]:
    """The engine's steps for a client's `steps`; Invalid with every problem found."""
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_STEPS:
        raise Invalid({"_schema": [f"Give 1 to {MAX_STEPS} steps."]})
    compiled: list[dict[str, Any]] = []
    errors: Errors = {}
    # The compiled index of each client step's first send, for a branch that names the step.
    send_of_step: dict[int, int] = {}
    for index, step in enumerate(steps):
        if not isinstance(step, dict) or len(step) != 1 or next(iter(step)) not in KINDS:
            errors[str(index)] = {"_schema": [f"A step is an object with one key: one of {', '.join(KINDS)}."]}
            continue
        kind, body = next(iter(step.items()))
        problems: Errors = {}
        if not isinstance(body, dict):
            problems["_schema"] = ["Give an object."]
        elif kind == "send" and "channels" in body:
            compiled += _fallback(body, problems, len(compiled))
        elif kind == "send":
            send_of_step[index] = len(compiled)
            compiled.append(_send(body, problems))
        elif kind == "branch":
            compiled.append(_branch(body, problems, send_of_step, _last_send(compiled)))
        else:
            compiled.append(COMPILERS[kind](body, problems))
        if problems:
            errors[str(index)] = {kind: problems}
    if errors:
        raise Invalid(errors)
    return compiled


def templates_used(compiled: list[dict[str, Any]]) -> list[tuple[str, Channel]]:
    """(template, channel) of every send step, for the checks that they exist."""
    return [(step["template"], Channel(step["channel"])) for step in compiled if step["kind"] == "send"]


def _send(body: Mapping[str, Any], problems: Errors) -> dict[str, Any]:
    _only(body, ("channel", "template", "category", "priority"), problems)
    channel = _choice(body, "channel", [c.value for c in Channel], problems, required=True)
    return {
        "kind": "send",
        "channel": channel,
        "template": _template(body.get("template"), "template", problems),
        "category": _text(body, "category", 64, problems),
        "priority": _choice(body, "priority", [p.value for p in Priority], problems),
    }


def _fallback(body: Mapping[str, Any], problems: Errors, first: int) -> list[dict[str, Any]]:
    """send → (delay → branch unless <engagement> of the previous → send) for each next channel."""
    _only(body, ("channels", "templates", "fallback_after", "unless", "category", "priority"), problems)
    channels = body.get("channels")
    if not isinstance(channels, list) or not 2 <= len(channels) <= 4 or len(set(map(str, channels))) != len(channels):
        problems["channels"] = ["Give 2 to 4 different channels, in the order to try them."]
        return []
    bad = [c for c in channels if c not in {c.value for c in Channel}]
    if bad:
        problems["channels"] = [f"Not a channel: {', '.join(map(str, bad))}."]
        return []
    templates = body.get("templates")
    if not isinstance(templates, dict) or set(templates) != set(channels):
        problems["templates"] = ["Give a template key for each channel: {channel: template}."]
        return []
    wait = _duration(body.get("fallback_after"), "fallback_after", problems, required=True)
    unless = _choice(body, "unless", list(ENGAGEMENTS), problems, required=True)
    category = _text(body, "category", 64, problems)
    priority = _choice(body, "priority", [p.value for p in Priority], problems)
    steps: list[dict[str, Any]] = []
    for position, channel in enumerate(channels):
        if position:
            previous_send = first + len(steps) - 1
            steps.append({"kind": "delay", "seconds": wait})
            steps.append({"kind": "branch", "condition": {"not": {"was": unless, "step": previous_send}}})
        template = _template(templates[channel], f"templates.{channel}", problems)
        steps.append(
            {"kind": "send", "channel": channel, "template": template, "category": category, "priority": priority}
        )
    return steps


def _delay(body: Mapping[str, Any], problems: Errors) -> dict[str, Any]:
    _only(body, ("for", "until", "offset"), problems)
    if ("for" in body) == ("until" in body):
        problems["_schema"] = ['Give "for" (a duration) or "until" (a time in the data, as "{{ name }}").']
        return {"kind": "delay", "seconds": 0}
    if "for" in body:
        return {"kind": "delay", "seconds": _duration(body["for"], "for", problems, required=True)}
    offset = _duration(body.get("offset", 0), "offset", problems, signed=True)
    return {"kind": "delay", "until": _reference(body.get("until"), "until", problems), "offset": offset}


def _branch(
    body: Mapping[str, Any], problems: Errors, send_of_step: Mapping[int, int], last_send: int | None
) -> dict[str, Any]:
    _only(body, ("if", "unless"), problems)
    if ("if" in body) == ("unless" in body):
        problems["_schema"] = ['Give "if" or "unless": the condition to go on, or to stop.']
        return {"kind": "branch", "condition": {}}
    given = "if" if "if" in body else "unless"
    compiled = conditions.compile_condition(body[given], send_of_step, last_send, problems, given)
    return {"kind": "branch", "condition": compiled if given == "if" else {"not": compiled}}


def _digest(body: Mapping[str, Any], problems: Errors) -> dict[str, Any]:
    _only(body, ("window", "sliding", "max", "key"), problems)
    window = _duration(body.get("window"), "window", problems, required=True)
    sliding = body.get("sliding", False)
    if not isinstance(sliding, bool):
        problems["sliding"] = ["Give true or false."]
    most = _duration(body.get("max"), "max", problems, required=sliding is True) if sliding is True else window
    if sliding is True and most < window:
        problems["max"] = ["The most a sliding window may grow to is at least the window."]
    key = _reference(body["key"], "key", problems) if "key" in body else None
    return {"kind": "digest", "window": window, "max": most, "key": key}


def _throttle(body: Mapping[str, Any], problems: Errors) -> dict[str, Any]:
    _only(body, ("limit", "window", "key"), problems)
    limit = body.get("limit")
    if type(limit) is not int or not 1 <= limit <= MAX_THROTTLE:
        problems["limit"] = [f"Give a whole number from 1 to {MAX_THROTTLE:,}."]
    window = _duration(body.get("window"), "window", problems, required=True)
    key = _reference(body["key"], "key", problems) if "key" in body else None
    return {"kind": "throttle", "limit": limit, "window": window, "key": key}


COMPILERS = {"delay": _delay, "digest": _digest, "throttle": _throttle}


def _last_send(compiled: list[dict[str, Any]]) -> int | None:
    sends = [index for index, step in enumerate(compiled) if step["kind"] == "send"]
    return sends[-1] if sends else None


def _only(body: Mapping[str, Any], allowed: tuple[str, ...], problems: Errors) -> None:
    for name in body:
        if name not in allowed:
            problems[name] = ["Unknown field."]


def _choice(
    body: Mapping[str, Any], name: str, allowed: list[str], problems: Errors, required: bool = False
) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if value not in allowed:
        problems[name] = [f"Must be one of: {', '.join(allowed)}."]
        return None
    return str(value)


def _text(body: Mapping[str, Any], name: str, most: int, problems: Errors) -> str | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, str) or not 1 <= len(value) <= most):
        problems[name] = [f"Give 1 to {most} characters."]
        return None
    return value


def _template(value: Any, name: str, problems: Errors) -> str:
    try:
        return TEMPLATE_KEY(value) if isinstance(value, str) else TEMPLATE_KEY("")
    except ValidationError as error:
        problems[name] = error.messages
        return ""


def _duration(value: Any, name: str, problems: Errors, required: bool = False, signed: bool = False) -> int:
    """Seconds of "90s", "10m", "2h", "1d" or a whole number of seconds, up to 30 days."""
    if value is None and not required:
        return 0
    seconds: int | None = None
    if type(value) is int:
        seconds = value
    elif isinstance(value, str) and (match := DURATION.match(value)):
        sign, amount, unit = match.groups()
        seconds = int(amount) * UNIT_SECONDS[unit] * (-1 if sign else 1)
    if seconds is None or abs(seconds) > MAX_SECONDS or (seconds < 0 and not signed):
        lowest = "-30d" if signed else "0s"
        problems[name] = [f'Give a duration from {lowest} to 30d, as "90s", "10m", "2h" or "1d".']
        return 0
    return seconds


def _reference(value: Any, name: str, problems: Errors) -> str:
    """The key path ("post.id") of a "{{ post.id }}" reference to the trigger's data."""
    match = REFERENCE.match(value) if isinstance(value, str) else None
    if match is None:
        problems[name] = ['Give a reference to the trigger\'s data, as "{{ name }}".']
        return ""
    return match.group(1)
