"""Daily quotas over HTTP: 429 with the quota's headers, batches refused whole, an operator's
raise at once, replays and test keys, the project's midnight, and use in the digest and /metrics.

Exactness under concurrency and with Redis down is proven in tests/access/test_quota.py and,
through gunicorn, in tests/faults/test_quotas.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from app.access import admission
from app.access.quota import DailyQuota
from tests.api.test_batches import batch, post_batch, stored
from tests.api.test_digest import digest
from tests.api.test_errors import assert_error_shape
from tests.api.test_metrics import scrape, value
from tests.conftest import ADMIN_KEY, bearer, create_project, email

ADMIN = bearer(ADMIN_KEY)


def quota_project(client, email_quota: int | None, **settings):
    return create_project(client, settings={"daily_quota": {"email": email_quota}, **settings})


def recipients(count: int) -> list[dict[str, str]]:
    return [{"email": f"r{n}@example.com"} for n in range(count)]


@pytest.fixture
def quota_clock() -> Iterator[list[float]]:
    """The API's quota clock, set by the test: a midnight without waiting for one."""
    quota: DailyQuota = admission.daily_quota()
    now = [datetime(2031, 3, 10, 14, 59, 59, tzinfo=UTC).timestamp()]  # 23:59:59 in Tokyo
    real, quota.clock = quota.clock, lambda: now[0]
    yield now
    quota.clock = real


def test_over_the_quota_is_429_with_the_quota_headers(client):
    project = quota_project(client, 2)
    answers = [project.send(email()) for _ in range(3)]
    assert [a.status_code for a in answers] == [202, 202, 429]
    assert [a.headers["X-Quota-Remaining"] for a in answers] == ["1", "0", "0"]
    refused = answers[-1]
    assert_error_shape(refused, 429)
    assert refused.headers["X-Quota-Limit"] == "2"
    assert refused.headers["Retry-After"] == refused.headers["X-Quota-Reset"]
    assert 1 <= int(refused.headers["Retry-After"]) <= 86_400
    errors = refused.get_json()["errors"]["daily_quota"]
    assert {k: errors[k] for k in ("channel", "limit", "used", "remaining", "requested")} == {
        "channel": "email",
        "limit": 2,
        "used": 2,
        "remaining": 0,
        "requested": 1,
    }
    assert datetime.fromisoformat(errors["resets_at"]).time().isoformat() == "00:00:00"


def test_a_batch_over_the_quota_is_refused_whole_with_what_remains(client, engine):
    project = quota_project(client, 10)
    assert post_batch(project, batch(recipients(7))).status_code == 202
    before = stored(engine, project.id)
    refused = post_batch(project, batch(recipients(4)))
    assert refused.status_code == 429
    assert refused.get_json()["errors"]["daily_quota"]["remaining"] == 3
    assert "3 of 10 left" in refused.get_json()["message"]
    assert stored(engine, project.id) == before
    fits = post_batch(project, batch([*recipients(3), {"email": "not-an-address"}]))
    assert fits.status_code == 202
    assert (fits.get_json()["accepted"], fits.headers["X-Quota-Remaining"]) == (3, "0")


def test_every_copy_a_send_makes_counts_as_a_message(client, engine):
    """cc and bcc addresses each get a message of their own (app/services/email_extras.py)."""
    project = quota_project(client, 4)
    answer = project.send(email(cc=["c@example.com"], bcc=["b@example.com"]))
    assert (answer.status_code, answer.headers["X-Quota-Remaining"]) == (202, "1")
    before = stored(engine, project.id)
    refused = post_batch(project, {**batch(recipients(1)), "cc": ["c@example.com"]})
    assert refused.status_code == 429
    assert refused.get_json()["errors"]["daily_quota"]["requested"] == 2
    assert stored(engine, project.id) == before


def test_an_operator_raises_the_quota_for_the_next_request(client):
    project = quota_project(client, 1)
    assert [project.send(email()).status_code for _ in range(2)] == [202, 429]
    raised = client.patch(
        f"/v1/admin/projects/{project.id}", json={"settings": {"daily_quota": {"email": 3}}}, headers=ADMIN
    )
    assert raised.get_json()["settings"]["daily_quota"] == {"email": 3}
    answers = [project.send(email()) for _ in range(3)]
    assert [a.status_code for a in answers] == [202, 202, 429]
    assert answers[0].headers["X-Quota-Limit"] == "3"


def test_a_replay_is_neither_counted_nor_refused(client):
    project = quota_project(client, 1)
    first = project.send(email(), **{"Idempotency-Key": "order-1"})
    replay = project.send(email(), **{"Idempotency-Key": "order-1"})
    assert (first.status_code, replay.status_code, replay.headers["Idempotent-Replayed"]) == (202, 202, "true")
    assert replay.get_json()["id"] == first.get_json()["id"]
    assert "X-Quota-Remaining" not in replay.headers
    assert project.send(email()).status_code == 429


def test_test_keys_are_not_counted(client):
    project = quota_project(client, 1)
    assert [project.send(email(), key=project.test_key).status_code for _ in range(3)] == [202] * 3
    assert project.send(email()).status_code == 202
    assert project.send(email()).status_code == 429


def test_projects_have_the_deployments_quota_unless_they_say_otherwise(client, migrated):
    assert migrated.daily_quotas == {"email": 250_000}
    plain = create_project(client)
    assert plain.send(email()).headers["X-Quota-Limit"] == "250000"
    sms = plain.send({"channel": "sms", "to": {"phone": "+15555550100"}, "content": {"text": "Hi"}})
    assert sms.status_code == 202 and "X-Quota-Limit" not in sms.headers
    unlimited = quota_project(client, None)
    assert "X-Quota-Limit" not in unlimited.send(email()).headers


def test_the_quota_resets_at_midnight_where_the_project_says(client, quota_clock):
    tokyo = quota_project(client, 1, quota_timezone="Asia/Tokyo")
    london = quota_project(client, 1, quota_timezone="Europe/London")
    for project in (tokyo, london):
        assert [project.send(email()).status_code for _ in range(2)] == [202, 429]
    assert tokyo.send(email()).headers["Retry-After"] == "1"
    quota_clock[0] += 1  # midnight in Tokyo; three in the afternoon in London
    assert tokyo.send(email()).status_code == 202
    refused = london.send(email())
    assert (refused.status_code, refused.headers["Retry-After"]) == (429, str(9 * 3600))


def test_bad_quota_settings_are_422(client):
    answer = client.post(
        "/v1/admin/projects",
        json={"name": "Q", "settings": {"daily_quota": {"email": -1, "fax": 5}, "quota_timezone": "Mars/Olympus"}},
        headers=ADMIN,
    )
    assert answer.status_code == 422
    errors = answer.get_json()["errors"]["json"]["settings"]
    assert errors["quota_timezone"] == ["Not an IANA time zone like Europe/Berlin."]
    assert set(errors["daily_quota"]) == {"email", "fax"}


def test_the_digest_and_metrics_show_use_against_the_quota(client):
    project = quota_project(client, 5)
    assert post_batch(project, batch(recipients(3))).status_code == 202
    uses = digest(client, project=project.id)["quotas"]
    assert [{k: use[k] for k in ("project", "channel", "used", "limit", "remaining")} for use in uses] == [
        {"project": project.id, "channel": "email", "used": 3, "limit": 5, "remaining": 2}
    ]
    families = scrape(client)
    labels = {"project": project.id, "channel": "email"}
    assert value(families["tidings_daily_quota_used"], "tidings_daily_quota_used", **labels) == 3
    assert value(families["tidings_daily_quota_limit"], "tidings_daily_quota_limit", **labels) == 5


def test_the_openapi_spec_documents_the_429_and_the_headers(client):
    spec = client.get("/openapi.json").get_json()
    for path in ("/v1/messages", "/v1/messages/batch"):
        responses = spec["paths"][path]["post"]["responses"]
        assert "Retry-After" in responses["429"]["headers"]
        assert {"X-Quota-Limit", "X-Quota-Remaining", "X-Quota-Reset", "RateLimit-Messages-Remaining"} <= set(
            responses["202"]["headers"]
        )
    settings = spec["components"]["schemas"]["ProjectSettings"]["properties"]
    assert {"daily_quota", "quota_timezone", "messages_per_min"} <= set(settings)
