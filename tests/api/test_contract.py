"""`/openapi.json` is a contract: valid, complete, and true to what the routes enforce.

Every operation declares the security it needs, and calling it without a key (or with the
wrong kind) answers exactly as declared; the spec validates with openapi-spec-validator; every
operation has a summary, a description and examples, and every example fits its schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from tests.conftest import ADMIN_KEY, bearer

METHODS = ("get", "put", "post", "patch", "delete")
# An id no route knows, whatever it names: it is a UUID too, for the routes that need one.
UNKNOWN_ID = "00000000-0000-0000-0000-000000000000"


@pytest.fixture(scope="module")
def spec(app) -> dict[str, Any]:
    answer = app.test_client().get("/openapi.json")
    assert answer.status_code == 200
    return answer.get_json()


def operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method in item:
                yield method, path, item[method]


def call(client, method: str, path: str, operation: dict[str, Any], key: str | None):
    """Call an operation at ids nobody has, with an empty JSON body where it takes one."""
    url = re.sub(r"\{[^}]+\}", UNKNOWN_ID, path)
    body = {"json": {}} if "requestBody" in operation else {}
    return client.open(url, method=method.upper(), headers=bearer(key) if key else {}, **body)


def schemes(operation: dict[str, Any]) -> set[str]:
    return {name for requirement in operation["security"] for name in requirement}


def test_the_spec_validates(spec):
    validate(spec)


def test_every_operation_declares_security_and_enforces_exactly_that(app, spec, project):
    client = app.test_client()
    counted = 0
    for method, path, operation in operations(spec):
        label = f"{method.upper()} {path}"
        assert "security" in operation, f"{label} declares no security"
        needed = schemes(operation)
        answer = call(client, method, path, operation, None)
        assert (answer.status_code == 401) == bool(needed), f"{label} without a key: {answer.status_code}, {needed}"
        counted += 1
        if not needed or path.endswith("/stream"):
            continue  # a stream with a valid key answers for ever; tests/api/test_streams.py holds it to its key
        with_project_key = call(client, method, path, operation, project.live_key).status_code
        with_admin_key = call(client, method, path, operation, ADMIN_KEY).status_code
        if "projectKey" in needed:
            assert with_project_key not in (401, 403), f"{label} refused a project key: {with_project_key}"
            assert with_admin_key == 401, f"{label} took the admin key: {with_admin_key}"
        else:
            assert needed == {"adminKey"}, label
            assert with_project_key == 403, f"{label} with a project key: {with_project_key}"
            assert with_admin_key not in (401, 403), f"{label} refused the admin key: {with_admin_key}"
    assert counted >= 60


def test_the_public_operations_are_the_ones_meant_to_be(spec):
    public = sorted(
        f"{method.upper()} {path}" for method, path, operation in operations(spec) if not schemes(operation)
    )
    assert public == [
        "GET /healthz",
        "GET /metrics",  # public unless METRICS_TOKEN is set (then it declares metricsToken)
        "GET /p/{token}",  # the signed link is the key
        "GET /readyz",
        "GET /t/c/{token}",
        "GET /t/o/{token}",
        "GET /u/{token}",
        "POST /p/{token}",
        "POST /u/{token}",
        "POST /v1/inbound/{provider}",  # the provider's signature is the authentication
        "POST /v1/inbound/{provider}/{project_id}",
    ]


def test_every_operation_has_a_summary_a_description_and_a_tag_of_the_readme(spec):
    tags = {tag["name"] for tag in spec["tags"]}
    for method, path, operation in operations(spec):
        label = f"{method.upper()} {path}"
        assert operation.get("summary"), f"{label} has no summary"
        assert operation.get("description"), f"{label} has no description"
        assert len(operation["tags"]) == 1 and operation["tags"][0] in tags, f"{label}: {operation['tags']}"


def resolve(spec: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    """A response, parameter or schema, following its `$ref` within the spec."""
    while "$ref" in item:
        node: Any = spec
        for part in item["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        item = node
    return item


def examples(spec: dict[str, Any], operation: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(where, schema, example) for every example of a body the operation takes or answers."""
    bodies = [("request", operation.get("requestBody", {}))]
    bodies += [(status, resolve(spec, answer)) for status, answer in operation["responses"].items()]
    for where, body in bodies:
        for media_type, media in body.get("content", {}).items():
            if "example" in media:
                yield f"{where} {media_type}", media.get("schema", {}), media["example"]


def test_every_operation_has_examples_and_each_fits_its_schema(spec):
    for method, path, operation in operations(spec):
        label = f"{method.upper()} {path}"
        found = list(examples(spec, operation))
        if "application/json" in operation.get("requestBody", {}).get("content", {}):
            assert any(where.startswith("request") for where, _, _ in found), f"{label}: no request example"
        assert any(where[0] in "23" for where, _, _ in found) or only_empty_success(spec, operation), (
            f"{label}: no example of a successful answer"
        )
        for where, schema, example in found:
            validator = Draft202012Validator({**schema, "components": spec["components"]})
            problems = [f"{list(error.path)}: {error.message}" for error in validator.iter_errors(example)]
            assert problems == [], f"{label} {where}: {problems}"


def test_every_path_parameter_is_documented_with_an_example(spec):
    for path, item in spec["paths"].items():
        documented = {p["name"]: p for p in item.get("parameters", []) if p["in"] == "path"}
        assert set(documented) == set(re.findall(r"{([^}]+)}", path)), path
        for name, parameter in documented.items():
            assert isinstance(parameter.get("example"), str) and parameter["schema"]["type"] == "string", (path, name)


def only_empty_success(spec: dict[str, Any], operation: dict[str, Any]) -> bool:
    """A 204, a redirect or a GIF has no body to give an example of."""
    successes = [resolve(spec, answer) for status, answer in operation["responses"].items() if status[0] in "23"]
    return all(not answer.get("content") or "image/gif" in answer["content"] for answer in successes)


def test_idempotency_and_limits_are_documented_where_they_apply(spec):
    for path in ("/v1/messages", "/v1/messages/batch"):
        operation = spec["paths"][path]["post"]
        [header] = [p for p in operation["parameters"] if p["in"] == "header"]
        assert header["name"] == "Idempotency-Key"
        assert header["schema"] == {"type": "string", "minLength": 1, "maxLength": 255}
        headers = operation["responses"]["202"]["headers"]
        assert {"Idempotent-Replayed", "RateLimit-Remaining", "X-Quota-Remaining"} <= set(headers)
        assert "Retry-After" in operation["responses"]["429"]["headers"]
    for _, path, operation in operations(spec):
        if "projectKey" in schemes(operation):
            answers = {status: resolve(spec, answer) for status, answer in operation["responses"].items()}
            assert "Retry-After" in answers["429"]["headers"], path
            assert "Retry-After" in answers["503"]["headers"], path  # an outage's answer
            for status, answer in answers.items():
                if status[0] == "2":
                    assert {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} <= set(answer["headers"])
