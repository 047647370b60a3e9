"""A branch's condition: checked when saved, read against one run's facts when the branch runs.

No code, only data: what a previous send step's message did (`{"was": "opened"}`, `{"was_not":
"delivered", "step": 0}`), a comparison of the trigger's data or the subscriber's fields
(`{"field": "data.plan", "eq": "pro"}`, `{"field": "subscriber.locale", "exists": true}`),
and `all`, `any`, `not` around them. Bounded in size and depth, so a condition costs each
run a few dict lookups.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# What a message may have done, as the engine reads it from the message, its events,
# engagements and inbox item (app/workflows/engine.py).
ENGAGEMENTS = ("delivered", "opened", "clicked", "read")
MAX_NODES = 32
MAX_DEPTH = 4
MAX_VALUE_CHARS = 1000
FIELD_ROOTS = ("data", "subscriber")
SUBSCRIBER_FIELDS = ("email", "phone", "locale", "timezone", "data")


def _compare(op: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    """A comparison that is false, not an error, between values that do not compare (3 < "a")."""

    def compare(found: Any, wanted: Any) -> bool:
        if isinstance(found, bool) or isinstance(wanted, bool) or type(found) is not type(wanted):
            numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (found, wanted))
            if not numbers:
                return False
        return op(found, wanted)

    return compare


OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda found, wanted: found == wanted,
    "ne": lambda found, wanted: found != wanted,
    "gt": _compare(lambda a, b: a > b),
    "gte": _compare(lambda a, b: a >= b),
    "lt": _compare(lambda a, b: a < b),
    "lte": _compare(lambda a, b: a <= b),
    "in": lambda found, wanted: found in wanted,
    "exists": lambda found, wanted: (found is not None) == wanted,
}


@dataclass(frozen=True)
class Facts:
    """What a condition may ask of one run: its data, its subscriber, and what each send
    step's message did (compiled step index → engagements)."""

    data: Mapping[str, Any]
    subscriber: Mapping[str, Any] | None = None
    engagements: Mapping[int, frozenset[str]] = field(default_factory=dict)


def compile_condition(
    given: Any, send_of_step: Mapping[int, int], last_send: int | None, problems: dict[str, Any], name: str
) -> dict[str, Any]:
    """The compiled condition; its problems go into `problems[name]`."""
    found: list[str] = []
    budget = [MAX_NODES]
    compiled = _compile(given, send_of_step, last_send, found, budget, 1)
    if found:
        problems[name] = found
    return compiled


def _compile(
    given: Any, sends: Mapping[int, int], last_send: int | None, found: list[str], budget: list[int], depth: int
) -> dict[str, Any]:
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        found.append(f"A condition has at most {MAX_NODES} parts, nested at most {MAX_DEPTH} deep.")
        return {}
    if not isinstance(given, dict) or not given:
        found.append("A condition is an object.")
        return {}
    if "all" in given or "any" in given:
        kind = "all" if "all" in given else "any"
        parts = given[kind]
        if len(given) != 1 or not isinstance(parts, list) or not parts:
            found.append(f'"{kind}" takes a list of conditions, alone.')
            return {}
        return {kind: [_compile(part, sends, last_send, found, budget, depth + 1) for part in parts]}
    if "not" in given:
        if len(given) != 1:
            found.append('"not" takes one condition, alone.')
            return {}
        return {"not": _compile(given["not"], sends, last_send, found, budget, depth + 1)}
    if "was" in given or "was_not" in given:
        return _engagement(given, sends, last_send, found)
    if "field" in given:
        return _comparison(given, found)
    found.append('Give "was", "was_not", "field", "all", "any" or "not".')
    return {}


def _engagement(
    given: Mapping[str, Any], sends: Mapping[int, int], last_send: int | None, found: list[str]
) -> dict[str, Any]:
    word = "was" if "was" in given else "was_not"
    if set(given) - {word, "step"} or given[word] not in ENGAGEMENTS:
        found.append(f'"{word}" takes one of: {", ".join(ENGAGEMENTS)}, and an optional "step".')
        return {}
    if "step" in given:
        step = sends.get(given["step"]) if type(given["step"]) is int else None
        if step is None:
            found.append('"step" names an earlier step that sends on one channel, by its index.')
            return {}
    elif last_send is None:
        found.append(f'"{word}" needs a send step before the branch.')
        return {}
    else:
        step = last_send
    condition = {"was": given[word], "step": step}
    return condition if word == "was" else {"not": condition}


def _comparison(given: Mapping[str, Any], found: list[str]) -> dict[str, Any]:
    path = given["field"]
    ops = [name for name in given if name != "field"]
    parts = path.split(".") if isinstance(path, str) else []
    if len(parts) < 2 or len(parts) > 9 or parts[0] not in FIELD_ROOTS or not all(parts):
        found.append('"field" is "data.<key>" or "subscriber.<field>", a dotted path.')
        return {}
    if parts[0] == "subscriber" and parts[1] not in SUBSCRIBER_FIELDS:
        found.append(f"A subscriber's fields are: {', '.join(SUBSCRIBER_FIELDS)}.")
        return {}
    if len(ops) != 1 or ops[0] not in OPERATORS:
        found.append(f'Give "field" and one of: {", ".join(OPERATORS)}.')
        return {}
    op, value = ops[0], given[ops[0]]
    if op == "exists" and not isinstance(value, bool):
        found.append('"exists" takes true or false.')
        return {}
    if op == "in" and not isinstance(value, list):
        found.append('"in" takes a list.')
        return {}
    if len(repr(value)) > MAX_VALUE_CHARS:
        found.append(f"A value to compare with has at most {MAX_VALUE_CHARS} characters.")
        return {}
    return {"field": path, "op": op, "value": value}


def holds(condition: Mapping[str, Any], facts: Facts) -> bool:
    """Whether the compiled condition holds for one run."""
    if "all" in condition:
        return all(holds(part, facts) for part in condition["all"])
    if "any" in condition:
        return any(holds(part, facts) for part in condition["any"])
    if "not" in condition:
        return not holds(condition["not"], facts)
    if "was" in condition:
        return condition["was"] in facts.engagements.get(condition["step"], frozenset())
    root, _, path = condition["field"].partition(".")
    found = lookup(facts.data if root == "data" else facts.subscriber or {}, path)
    return OPERATORS[condition["op"]](found, condition["value"])


def message_steps(condition: Mapping[str, Any]) -> set[int]:
    """The send steps whose messages the condition asks about."""
    if "was" in condition:
        return {condition["step"]}
    return set().union(set(), *(message_steps(part) for part in _parts(condition)))


def asks_subscriber(condition: Mapping[str, Any]) -> bool:
    """Whether the condition reads the subscriber's fields (one query for the set, when so)."""
    if "field" in condition:
        return condition["field"].startswith("subscriber.")
    return any(asks_subscriber(part) for part in _parts(condition))


def _parts(condition: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The conditions an `all`, `any` or `not` holds; none for the others."""
    return condition.get("all") or condition.get("any") or ([condition["not"]] if "not" in condition else [])


def lookup(data: Any, path: str) -> Any:
    """The value at a key path ("a.b") of nested objects; None where there is none."""
    for part in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data
