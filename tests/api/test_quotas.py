"""Daily quotas over HTTP: 429 with the quota's headers, batches refused whole, an operator's
raise at once, replays and test keys, the project's midnight, and use in the digest and /metrics.

Exactness under concurrency and with Redis down is proven in tests/access/test_quota.py and,
through gunicorn, in tests/faults/test_quotas.py.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from app.access import admission
from app.access.quota import DailyQuota
from tests.api.test_batches import batch, post_batch, stored
from tests.api.test_digest import digest
from tests.api.test_email_extras import stored as written
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
        assert {"X-Storage-Quota-Limit", "X-Storage-Quota-Remaining", "X-Storage-Quota-Reset"} <= set(
            responses["202"]["headers"]
        )
    settings = spec["components"]["schemas"]["ProjectSettings"]["properties"]
    assert {"daily_quota", "quota_timezone", "messages_per_min", "daily_storage_bytes"} <= set(settings)


# Daily storage: bytes of words and files a key kind's sends may store in the shared PostgreSQL.


def storage_project(client, **bounds: int | None):
    return create_project(client, settings={"daily_storage_bytes": bounds})


def with_words(size: int) -> dict:
    """An email whose words are `size` bytes (live keys' files go to providers that may not carry them)."""
    return email(content={"subject": "S", "text": "x" * size})


def with_file(size: int, **extra) -> dict:
    """An email carrying a file whose stored (base64) text is `size` bytes."""
    content = base64.b64encode(b"\0" * (size // 4 * 3)).decode()
    return email(attachments=[{"filename": "scan.pdf", "content_type": "application/pdf", "content": content}], **extra)


def test_a_test_keys_files_fill_its_day_then_429_says_which_limit_and_until_when(client, engine):
    project = storage_project(client, test=10_000)
    answers = [project.send(with_file(4000), key=project.test_key) for _ in range(3)]
    assert [a.status_code for a in answers] == [202, 202, 429]
    first, second, refused = answers
    each = 10_000 - int(first.headers["X-Storage-Quota-Remaining"])
    assert 4000 < each < 4100  # the file, and the words and data of its one message
    assert int(second.headers["X-Storage-Quota-Remaining"]) == 10_000 - 2 * each
    assert_error_shape(refused, 429)
    assert refused.headers["Retry-After"] == refused.headers["X-Storage-Quota-Reset"]
    errors = refused.get_json()["errors"]["daily_storage_bytes"]
    assert {k: errors[k] for k in ("kind", "limit", "used", "remaining", "requested")} == {
        "kind": "test",
        "limit": 10_000,
        "used": 2 * each,
        "remaining": 10_000 - 2 * each,
        "requested": each,
    }
    assert datetime.fromisoformat(errors["resets_at"]).time().isoformat() == "00:00:00"
    assert errors["resets_at"] in refused.get_json()["message"]
    assert written(engine, project.id) == {"batches": 0, "messages": 2, "attachments": 2}
    # The live keys' storage is their own: the test key's day took none of it.
    live = project.send(email()).headers
    assert int(live["X-Storage-Quota-Limit"]) - int(live["X-Storage-Quota-Remaining"]) < 100


def test_a_send_larger_than_a_whole_day_is_413_and_writes_nothing(client, engine):
    project = storage_project(client, test=10_000)
    refused = project.send(with_file(12_000), key=project.test_key)
    assert_error_shape(refused, 413)
    errors = refused.get_json()["errors"]["daily_storage_bytes"]
    assert (errors["kind"], errors["limit"]) == ("test", 10_000) and errors["requested"] > 12_000
    assert "Retry-After" not in refused.headers
    assert written(engine, project.id) == {"batches": 0, "messages": 0, "attachments": 0}


def test_a_batch_stores_its_words_once_per_message_and_is_refused_whole(client, engine):
    project = storage_project(client, live=20_000)
    words = {"subject": "Monthly news", "text": "x" * 1000}
    assert post_batch(project, batch(recipients(15), content=words)).status_code == 202
    before = written(engine, project.id)
    refused = post_batch(project, batch(recipients(5), content=words))
    assert refused.status_code == 429
    errors = refused.get_json()["errors"]["daily_storage_bytes"]
    assert errors["kind"] == "live" and 5 * 1000 < errors["requested"] < 5 * 1100
    assert written(engine, project.id) == before


def test_a_storage_refusal_gives_back_the_message_quota_it_took(client):
    project = create_project(client, settings={"daily_quota": {"email": 5}, "daily_storage_bytes": {"live": 3000}})
    assert project.send(with_words(4000)).status_code == 413
    assert project.send(with_words(2000)).headers["X-Quota-Remaining"] == "4"
    assert project.send(with_words(2000)).status_code == 429
    assert project.send(email()).headers["X-Quota-Remaining"] == "3"


def test_when_redis_lost_the_day_postgresql_counts_the_bytes_stored(client, app):
    """The day's counter gone (Redis lost it, or a new day): PostgreSQL's count of the
    stored words and files decides, and finds the earlier send's."""
    project = storage_project(client, test=10_000)
    assert project.send(with_file(6000), key=project.test_key).status_code == 202
    redis_client = app.extensions["tidings"].redis
    assert redis_client.delete(*redis_client.keys(f"tidings:quota:{project.id}:test-bytes:*")) == 1
    refused = project.send(with_file(6000), key=project.test_key)
    assert refused.status_code == 429
    assert 6000 < refused.get_json()["errors"]["daily_storage_bytes"]["used"] < 6100


def test_keys_have_the_deployments_storage_unless_the_project_says_otherwise(client, migrated):
    assert (migrated.daily_storage_bytes, migrated.test_daily_storage_bytes) == (10 * 2**30, 20 * 2**20)
    plain = create_project(client)
    assert plain.send(email(), key=plain.test_key).headers["X-Storage-Quota-Limit"] == str(20 * 2**20)
    assert plain.send(email()).headers["X-Storage-Quota-Limit"] == str(10 * 2**30)
    unbounded = storage_project(client, test=None)
    assert "X-Storage-Quota-Limit" not in unbounded.send(email(), key=unbounded.test_key).headers
    settings = {"daily_storage_bytes": {"test": -1, "all": 5}}
    bad = client.post("/v1/admin/projects", json={"name": "S", "settings": settings}, headers=ADMIN)
    assert set(assert_error_shape(bad, 422)["errors"]["json"]["settings"]["daily_storage_bytes"]) == {"test", "all"}
