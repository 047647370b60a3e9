"""What `/openapi.json` promises for every operation, written once rather than by each route.

Each blueprint says who may call it (`Access`: the check it runs before each request, and the
security schemes the spec declares for it), so what is enforced and what is documented cannot
drift apart. From that and from a route's own decorators, `document` adds to each operation the
error answers it can give (in the one error shape of app/errors.py, with an example), the
rate-limit headers of project routes, and the examples of app/api/examples.py; a client
generated from the spec then authenticates, sends idempotently and reads errors without edits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from apispec import APISpec
from flask import Flask
from marshmallow import Schema

from app.api import examples
from app.api.limits import RATE_LIMIT_HEADERS, RETRY_AFTER
from app.config import Settings
from app.schemas.batches import BatchRecipientSchema, TopicAudienceSchema

PROJECT_KEY = "projectKey"
ADMIN_KEY = "adminKey"
SUBSCRIBER_TOKEN = "subscriberToken"
METRICS_TOKEN = "metricsToken"

SECURITY_SCHEMES = {
    PROJECT_KEY: "A project's API key, `tid_live_…` or `tid_test_…` (made with the admin key: "
    "`POST /v1/admin/projects/{project_id}/keys`). It opens that project's routes only.",
    ADMIN_KEY: "The deployment's admin key (TIDINGS_ADMIN_KEY): projects, their keys, and operations. "
    "A project key on an admin route is a 403.",
    SUBSCRIBER_TOKEN: "A short-lived token for one subscriber's browser (`POST /v1/subscribers/{id}/token`): "
    "that subscriber's inbox and inbox stream, nothing else.",
    METRICS_TOKEN: "METRICS_TOKEN: `/metrics` answers nobody else. Without it set, `/metrics` answers only "
    "the machine itself, and only while the API listens on loopback alone.",
}


@dataclass(frozen=True)
class Access:
    """Who may call a blueprint's routes: `check` runs before each of its requests, and the spec
    declares `schemes` (any one of them opens the routes; none: public). `needed` says whether a
    deployment's settings ask for a key at all (`/metrics`: see `metrics.token_needed`)."""

    schemes: tuple[str, ...] = ()
    check: Callable[[], None] | None = None
    needed: Callable[[Settings], bool] = lambda settings: True
    # Errors every route of the blueprint can answer beyond 401 (a project's rate limit: 429).
    errors: tuple[int, ...] = ()

    def security(self, app: Flask) -> list[dict[str, list[str]]]:
        if not self.schemes or not self.needed(app.extensions["tidings"].settings):
            return []
        return [{scheme: []} for scheme in self.schemes]


PUBLIC = Access()

# The README's sections, in its order: each operation is tagged with the one that tells of it.
PROJECTS = "Projects and keys"
MESSAGES = "Messages"
AUDIENCE = "Audience"
WORKFLOWS = "Workflows"
EVENTS = "Events"
STATUS_WEBHOOKS = "Status webhooks"
OPERATIONS = "Operations"
TAGS = [
    {
        "name": PROJECTS,
        "description": "Admin key. Projects, their API keys, their webhook signing secrets and "
        "their own provider accounts (README: A walk through the API; A project's own account).",
    },
    {
        "name": MESSAGES,
        "description": "Send one notification or one to many, follow it, cancel it (README: A walk "
        "through the API; Email extras; Limits; Simulated recipients).",
    },
    {"name": AUDIENCE, "description": "Subscribers, topics, preferences, suppressions, templates (README: Audience)."},
    {
        "name": WORKFLOWS,
        "description": "Steps around sends: channel fallback, delays, conditions, digests, throttles "
        "(README: Workflows).",
    },
    {
        "name": EVENTS,
        "description": "The delivery log, live streams, outbound webhooks, the in-app inbox, tracking "
        "and unsubscribe links (README: Events).",
    },
    {
        "name": STATUS_WEBHOOKS,
        "description": "Providers' status webhooks, authenticated by each provider's "
        "signature (README: Status webhooks).",
    },
    {
        "name": OPERATIONS,
        "description": "Health, metrics, providers' pauses, dead letters and the digest (README: Operating it).",
    },
]

# Each error an operation can answer, with why and an example of its body.
ERRORS: dict[int, tuple[str, dict[str, Any] | None]] = {
    400: (
        "The request could not be read: malformed JSON, a NUL or bytes that are not UTF-8 in the path or query, "
        "or a `cursor` this API did not give out.",
        {"query": {"cursor": ["Not a cursor this list gave out."]}},
    ),
    401: ("No API key, or one that is unknown or revoked (with `WWW-Authenticate: Bearer`).", None),
    403: (
        "The key is valid but opens something else (a project key on an admin route, a token of another subscriber).",
        None,
    ),
    404: ("Nothing by that id in this project (another project's ids are not found either).", None),
    409: (
        "The request conflicts with the current state (a duplicate, or an Idempotency-Key reused with "
        "another body); `message` says which.",
        None,
    ),
    413: ("The body is over its limit: 1 MiB, or 16 MiB on bulk routes and sends with attachments.", None),
    415: ("The body is not `application/json`.", None),
    422: (
        "A field is invalid; `errors` names each, by location (`json`, `query`, `headers`, `path`).",
        {"json": {"to": {"email": ["Not a valid email address."]}}},
    ),
    429: (
        "A limit has no room: the project's requests a minute (its `RateLimit-*` headers say how it stands) or, "
        "on sends, messages a minute or the channel's daily quota. Retry after `Retry-After` seconds.",
        None,
    ),
    503: (
        "A dependency did not answer (PostgreSQL, Redis, the broker), or the server is reading as many bodies over "
        "1 MiB as it may at once; nothing was written. Retry after `Retry-After` seconds where given.",
        None,
    ),
}
HEADERS_OF_ERROR = {429: {**RETRY_AFTER, **RATE_LIMIT_HEADERS}, 503: RETRY_AFTER}


def error_component(status: int) -> str:
    return f"Error{status}"


def register(spec: APISpec) -> None:
    """The security schemes and the error answers every operation refers to."""
    for name, description in SECURITY_SCHEMES.items():
        spec.components.security_scheme(name, {"type": "http", "scheme": "bearer", "description": description})
    for status in ERRORS:
        spec.components.response(error_component(status), error_answer(status))
    # The two forms of a batch's `recipients`, which its schema's `oneOf` names (app/schemas/batches.py).
    spec.components.schema("BatchRecipient", schema=BatchRecipientSchema)
    spec.components.schema("TopicAudience", schema=TopicAudienceSchema)


def error_answer(status: int, description: str | None = None) -> dict[str, Any]:
    """An error answer in the one error shape, with an example of it; `description` says why, when the route knows."""
    description = description or ERRORS[status][0]
    example: dict[str, Any] = {"code": status, "status": HTTPStatus(status).phrase, "message": description}
    if ERRORS[status][1]:
        example["errors"] = ERRORS[status][1]
    answer: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}, "example": example}},
    }
    if status in HEADERS_OF_ERROR:
        answer["headers"] = HEADERS_OF_ERROR[status]
    return answer


PATH_PARAMETER = re.compile(r"<(?:[^:<>]+:)?[^<>]+>")
PATH_PARAMETER_NAME = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")


def path_parameters(rule: str) -> list[dict[str, Any]]:
    """The path parameters of `rule` with their examples, for flask-smorest to merge into the
    ones it reads from the rule (which carry their type)."""
    names = PATH_PARAMETER_NAME.findall(rule)
    return [{"in": "path", "name": name, "example": examples.PATH_PARAMETERS[name]} for name in names]


def document(doc: dict[str, Any], info: Mapping[str, Any], access: Access, app: Flask) -> dict[str, Any]:
    """Complete one operation's doc: its security, every error it can answer, its headers, its examples."""
    security = access.security(app)
    doc["security"] = security
    doc["operationId"] = info["operation_id"]
    responses = doc.setdefault("responses", {})
    for status in errors_of(doc, info, access, bool(security)):
        responses[str(status)] = error_of(status, responses.pop(status, None) or responses.pop(str(status), None))
    for status, answer in responses.items():
        if isinstance(answer, MutableMapping):
            if PROJECT_KEY in access.schemes and str(status).startswith("2"):
                answer["headers"] = {**RATE_LIMIT_HEADERS, **answer.get("headers", {})}
            add_examples(answer.get("content", {}))
    add_examples(doc.get("requestBody", {}).get("content", {}))
    return doc


def error_of(status: int, declared: Any) -> Any:
    """A route's own error answer if it gave one in full; the shared one with the route's own
    description if it gave one; else a reference to the shared one."""
    if isinstance(declared, Mapping) and "content" in declared:
        return declared
    description = declared.get("description") if isinstance(declared, Mapping) else None
    if description and description != HTTPStatus(status).phrase:
        return error_answer(status, description)
    return error_component(status)


def errors_of(doc: Mapping[str, Any], info: Mapping[str, Any], access: Access, secured: bool) -> list[int]:
    """The error statuses an operation can answer, from how it is called and who may call it;
    every one may answer 503 while PostgreSQL, Redis or the broker is away (app/errors.py)."""
    statuses = {400, 503, *access.errors}
    statuses.update(int(status) for status in doc.get("responses", {}) if str(status)[0] in "45")
    if secured:
        statuses.add(401)
    if secured and PATH_PARAMETER.search(info.get("rule", "")):
        statuses.add(404)
    if "requestBody" in doc:
        statuses.update((413, 415, 422))
    if any(parameter.get("in") == "query" for parameter in doc.get("parameters", []) if isinstance(parameter, dict)):
        statuses.add(422)
    return sorted(statuses)


def add_examples(content: dict[str, Any]) -> None:
    """An example for each JSON body whose schema has one in app/api/examples.py, unless the route gave its own."""
    for media in content.values():
        schema = media.get("schema")
        if "example" in media or "examples" in media or not isinstance(schema, Schema | type):
            continue
        example = examples.of(schema)
        if example is not None:
            media["example"] = example


def event_stream(example: str) -> dict[str, Any]:
    """How the spec shows a 200 that is a stream of server-sent events, with `example` as its start."""
    return {"content": {"text/event-stream": {"schema": {"type": "string"}, "example": example}}}
