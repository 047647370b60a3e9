"""The per-project API rate limits, requests and messages a minute: shared in Redis, with headers.

Failing open when Redis is down is proven with a real API process in tests/faults.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from flask.testing import FlaskClient

from app.api import create_app
from tasks.celery_app import configure
from tests.api.test_batches import batch, post_batch, stored
from tests.api.test_quotas import recipients
from tests.conftest import create_project, email


def test_over_the_limit_is_429_with_headers(client):
    project = create_project(client, rate_limit_per_min=3)
    answers = [project.send(email()) for _ in range(4)]
    assert [a.status_code for a in answers] == [202, 202, 202, 429]
    assert [a.headers["RateLimit-Remaining"] for a in answers] == ["2", "1", "0", "0"]
    limited = answers[-1]
    assert limited.headers["RateLimit-Limit"] == "3"
    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    assert limited.headers["Retry-After"] == limited.headers["RateLimit-Reset"]
    assert limited.get_json()["code"] == 429


def test_test_keys_have_the_deployments_request_limit_unless_the_project_sets_one(client, settings, migrated):
    assert migrated.test_rate_limit_per_min == 1500
    configure(replace(settings, test_rate_limit_per_min=3))
    project = create_project(client)
    answers = [project.call("GET", "/v1/templates", key=project.test_key) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].headers["RateLimit-Limit"] == "3"
    assert [project.call("GET", "/v1/templates").status_code for _ in range(4)] == [200] * 4  # live: none
    own = create_project(client, rate_limit_per_min=5)
    assert [own.call("GET", "/v1/templates", key=own.test_key).status_code for _ in range(4)] == [200] * 4


def test_reads_count_against_the_same_limit(client):
    project = create_project(client, rate_limit_per_min=2)
    message_id = project.send(email()).get_json()["id"]
    assert project.get(message_id).status_code == 200
    assert project.get(message_id).status_code == 429


def test_limits_are_per_project(client):
    limited = create_project(client, rate_limit_per_min=1)
    other = create_project(client, rate_limit_per_min=1)
    assert limited.send(email()).status_code == 202
    assert limited.send(email()).status_code == 429
    assert other.send(email()).status_code == 202


def test_project_without_a_limit_has_no_headers(project):
    assert "RateLimit-Limit" not in project.send(email()).headers


def test_a_batch_costs_each_of_its_messages_against_the_message_limit(client, engine):
    project = create_project(client, settings={"messages_per_min": 10})
    first = post_batch(project, batch(recipients(8)))
    assert (first.status_code, first.headers["RateLimit-Messages-Remaining"]) == (202, "2")
    before = stored(engine, project.id)
    refused = post_batch(project, batch(recipients(3)))
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert refused.headers["Retry-After"] == refused.headers["RateLimit-Messages-Reset"]
    assert refused.get_json()["errors"]["messages_per_min"] == {"limit": 10, "remaining": 2, "requested": 3}
    assert stored(engine, project.id) == before
    assert [project.send(email()).status_code for _ in range(3)] == [202, 202, 429]


def test_a_batch_larger_than_the_message_limit_is_told_it_never_fits(client):
    project = create_project(client, settings={"messages_per_min": 5})
    refused = post_batch(project, batch(recipients(6)))
    assert refused.status_code == 429
    assert "can never fit" in refused.get_json()["message"]


def test_what_a_refused_send_took_from_the_minute_is_given_back(client):
    project = create_project(client, settings={"messages_per_min": 100, "daily_quota": {"email": 5}})
    assert post_batch(project, batch(recipients(10))).status_code == 429  # the daily quota refuses it
    fits = post_batch(project, batch(recipients(5)))
    assert (fits.status_code, fits.headers["RateLimit-Messages-Remaining"]) == (202, "95")


@pytest.fixture
def limited_deployment(migrated, fake_provider) -> Iterator[FlaskClient]:
    """An API whose deployment allows 2 messages a minute per project; the session's settings after."""
    try:
        yield create_app(replace(migrated, messages_per_min=2)).test_client()
    finally:
        configure(migrated)


def test_the_deployments_message_limit_applies_unless_a_project_says_otherwise(limited_deployment):
    default = create_project(limited_deployment)
    assert [default.send(email()).status_code for _ in range(3)] == [202, 202, 429]
    unlimited = create_project(limited_deployment, settings={"messages_per_min": None})
    assert [unlimited.send(email()).status_code for _ in range(3)] == [202] * 3
