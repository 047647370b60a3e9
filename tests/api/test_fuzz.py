"""Every operation of `/openapi.json`, fuzzed by schemathesis: with requests its schema allows
and with requests that break it, with a project's keys and, for admin operations, the admin key.

Whatever a client sends, the API answers without a 5xx and in the shape it documents; a
request that breaks the schema is a 4xx in the one error shape. Admin operations are global
(requeue every project's dead messages, pause a provider for everyone, delete projects), so
they are fuzzed against a deployment of their own: a database migrated for the test and a
Redis of its own, both gone after it; the tasks they publish name rows of that database only.
Examples are derandomised and bounded per operation, so a run is repeatable; `make fuzz`
runs many more (FUZZ_EXAMPLES).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, response_schema_conformance

from app.api import create_app
from app.api.contract import ADMIN_KEY as ADMIN_SCHEME
from app.config import Settings
from app.db import engine_for
from app.runtime.embedded import EmbeddedRedis
from tasks.celery_app import configure
from tests.conftest import ADMIN_KEY, bearer, create_project
from tests.databases import Databases

# Per operation, key and mode: the three tests take about a minute together on two cores.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))
# Streams answer forever by design; their limits are tested in test_streams.py.
STREAMS = re.compile(r"/stream$")
CHECKS = [not_a_server_error, response_schema_conformance]
POSITIVE, NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE


def is_admin(operation) -> bool:
    return operation.definition.raw.get("security") == [{ADMIN_SCHEME: []}]


def operations_of(app: Flask, admin: bool) -> list[Any]:
    """The operations of `app`'s spec that the admin key opens (`admin`) or that it does not, streams left out."""
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app)
    found = [result.ok() for result in schema.get_all_operations()]
    return [op for op in found if is_admin(op) == admin and not STREAMS.search(op.path)]


def assert_rejected(answer) -> None:
    """A request that breaks the schema: a 4xx in the one error shape (app/errors.py)."""
    body = answer.json()
    assert 400 <= answer.status_code < 500, (answer.status_code, body)
    assert body["code"] == answer.status_code and body["status"] and body["message"], body


def fuzz(operation, key: str, mode: GenerationMode, *, also: str | None = None) -> None:
    """Call one operation with EXAMPLES generated requests of `mode` with `key` (and `also`
    with another key); raises on the first failure. The key is no part of what is generated,
    so a request that breaks the schema breaks it elsewhere."""

    @given(case=operation.as_strategy(generation_mode=mode, headers=bearer(key)))
    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    def run(case) -> None:
        answer = case.call()
        case.validate_response(answer, checks=CHECKS)
        if breaks_the_schema(operation, case):
            assert_rejected(answer)
        if also is not None:
            case.validate_response(case.call(headers=bearer(also)), checks=CHECKS)

    run()


def breaks_the_schema(operation, case) -> bool:
    """Whether `case` breaks the schema where the API must refuse it: query parameters the
    operation does not declare are ignored, as HTTP APIs do, so a case that has them may pass."""
    broken = any(part.mode is NEGATIVE for part in case.meta.components.values())
    undeclared = set(case.query or {}) - {parameter.name for parameter in operation.query}
    return broken and not undeclared


def breakable(operation) -> bool:
    """Whether a request can break the operation's schema: in its body, query or headers (the
    key is not generated). A path parameter cannot: any non-empty segment is a valid one."""
    headers = [parameter for parameter in operation.headers if parameter.name != "Authorization"]
    return bool(list(operation.body) or list(operation.query) or headers)


def failures_of(
    operations: Iterable[Any], key: str, mode: GenerationMode, *, also: str | None = None
) -> dict[str, str]:
    """Each operation's first failure, by its label: every operation is fuzzed, whatever fails."""
    failures = {}
    for operation in operations:
        try:
            fuzz(operation, key, mode, also=also)
        except (Exception, BaseExceptionGroup) as error:  # schemathesis raises a BaseExceptionGroup; report them all
            failures[f"{operation.label} ({mode.value})"] = f"{type(error).__name__}: {str(error)[:2000]}"
    return failures


def report(failures: dict[str, str]) -> str:
    return "\n\n".join(f"{label}\n{detail}" for label, detail in failures.items())


def test_no_operation_answers_5xx_or_off_its_documented_shape(app):
    project = create_project(app.test_client())
    operations = operations_of(app, admin=False)
    assert len(operations) >= 50, f"only {len(operations)} operations found in /openapi.json"
    failures = failures_of(operations, project.live_key, POSITIVE, also=project.test_key)
    assert failures == {}, report(failures)


def test_a_request_that_breaks_the_schema_answers_4xx_in_the_error_shape(app):
    project = create_project(app.test_client())
    operations = [operation for operation in operations_of(app, admin=False) if breakable(operation)]
    failures = failures_of(operations, project.live_key, NEGATIVE)
    assert failures == {}, report(failures)


@pytest.fixture
def own_deployment(migrated: Settings, databases: Databases) -> Iterator[Flask]:
    """An app on a database and a Redis of its own, both gone after it; the suite's settings
    are the process's again after it."""
    redis_server = EmbeddedRedis().start()
    try:
        with databases.own() as own_url:
            try:
                yield create_app(
                    Settings.from_env({**migrated.environ, "DATABASE_URL": own_url, "REDIS_URL": redis_server.url})
                )
            finally:
                configure(migrated)
                engine_for(own_url).dispose()
    finally:
        redis_server.stop(kill=True)


def test_admin_operations_answer_no_5xx_with_the_admin_key(own_deployment):
    operations = operations_of(own_deployment, admin=True)
    assert len(operations) >= 17, f"only {len(operations)} admin operations found in /openapi.json"
    create_project(own_deployment.test_client())  # something for them to find
    failures = {
        **failures_of(operations, ADMIN_KEY, POSITIVE),
        **failures_of([operation for operation in operations if breakable(operation)], ADMIN_KEY, NEGATIVE),
    }
    assert failures == {}, report(failures)
