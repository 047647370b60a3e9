"""Every operation of `/openapi.json`, fuzzed by schemathesis with a project's live and test keys.

Whatever a client sends, the API answers without a 5xx and in the shape it documents (the
error shape included). Examples come from the spec, derandomised and bounded per operation,
so a run is repeatable; `make fuzz` runs many more (FUZZ_EXAMPLES).
"""

from __future__ import annotations

import os
import re

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance

from tests.conftest import bearer, create_project

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "30"))
# Streams answer forever by design; their limits are tested in test_streams.py.
STREAMS = re.compile(r"/stream$")
CHECKS = [not_a_server_error, response_schema_conformance]


def fuzz(operation, keys: tuple[str, ...]) -> None:
    """Call one operation with EXAMPLES generated requests, once per key; raises on the first failure."""

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    def run(case) -> None:
        for key in keys:
            case.call_and_validate(headers=bearer(key), checks=CHECKS)

    run()


def test_no_operation_answers_5xx_or_off_its_documented_shape(app):
    project = create_project(app.test_client())
    keys = (project.live_key, project.test_key)
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    fuzzed, failures = 0, {}
    for operation in operations:
        if STREAMS.search(operation.path):
            continue
        try:
            fuzz(operation, keys)
        except (Exception, BaseExceptionGroup) as error:  # schemathesis raises a BaseExceptionGroup; report them all
            failures[operation.label] = f"{type(error).__name__}: {str(error)[:2000]}"
        fuzzed += 1
    assert fuzzed >= 50, f"only {fuzzed} operations found in /openapi.json"
    assert failures == {}, "\n\n".join(f"{label}\n{detail}" for label, detail in failures.items())
