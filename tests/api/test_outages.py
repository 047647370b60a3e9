"""A request that needs PostgreSQL or Redis while it is away answers 503 with Retry-After in
the one error shape, logged in one line, and writes nothing; a request with a fallback goes on.

"Away" is an app whose DATABASE_URL or REDIS_URL names a closed port on 127.0.0.1: the
suite's own servers are never stopped. The sends are made with a key created through the
suite's app, so the away app finds nothing remembered and must ask.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from app.api import create_app
from app.config import Settings
from app.outages import RETRY_AFTER_SECONDS
from tasks.celery_app import configure
from tests.api.test_errors import assert_error_shape
from tests.conftest import ADMIN_KEY, bearer, closed_port, create_project, email
from tests.console.conftest import sign_in

BATCH = {"channel": "email", "content": {"subject": "s", "text": "t"}, "recipients": [{"email": "a@example.com"}]}


def away(migrated: Settings, **urls: str) -> Iterator[FlaskClient]:
    """A client of an app whose `urls` point at a closed port; the pipeline keeps the suite's settings."""
    try:
        yield create_app(replace(migrated, **urls)).test_client()
    finally:
        configure(migrated)


@pytest.fixture
def database_away(migrated: Settings) -> Iterator[FlaskClient]:
    yield from away(migrated, database_url=f"postgresql://postgres@127.0.0.1:{closed_port()}/tidings")


@pytest.fixture
def redis_away(migrated: Settings) -> Iterator[FlaskClient]:
    yield from away(migrated, redis_url=f"redis://127.0.0.1:{closed_port()}/0")


def assert_unavailable(answer) -> None:
    """503 in the error shape, told when to retry."""
    assert_error_shape(answer, 503)
    assert answer.headers["Retry-After"] == str(RETRY_AFTER_SECONDS)


def assert_logged_in_one_line(caplog: pytest.LogCaptureFixture, answers: int) -> None:
    """One warning per answer, no traceback, nothing logged as an error."""
    outages = [record for record in caplog.records if "a service is away" in record.getMessage()]
    assert len(outages) == answers
    assert all(record.exc_info is None and "\n" not in record.getMessage() for record in outages)
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []


def rows(engine, project_id: str) -> tuple[int, int]:
    """The project's messages and batches."""
    with engine.connect() as connection:
        return connection.execute(
            text(
                "SELECT (SELECT count(*) FROM messages WHERE project_id = :p),"
                " (SELECT count(*) FROM batches WHERE project_id = :p)"
            ),
            {"p": project_id},
        ).one()


def test_with_the_database_away_sends_batches_reads_and_admin_answer_503_with_retry_after(
    client, database_away, engine, caplog
):
    project = create_project(client)
    key = bearer(project.live_key)
    new_project = {"id": f"{project.id}-away", "name": "Away"}
    with caplog.at_level(logging.WARNING):
        answers = [
            database_away.post("/v1/messages", json=email(), headers=key),
            database_away.post("/v1/messages/batch", json=BATCH, headers=key),
            database_away.get("/v1/messages/00000000-0000-0000-0000-000000000000", headers=key),
            database_away.post("/v1/admin/projects", json=new_project, headers=bearer(ADMIN_KEY)),
        ]
    for answer in answers:
        assert_unavailable(answer)
    assert_logged_in_one_line(caplog, len(answers))
    assert rows(engine, project.id) == (0, 0)
    assert client.get(f"/v1/admin/projects/{new_project['id']}", headers=bearer(ADMIN_KEY)).status_code == 404


def test_with_the_database_away_the_console_answers_a_503_page_with_retry_after(client, database_away):
    project = create_project(client)
    assert_console_unavailable(sign_in(database_away, project.live_key))  # the key is looked up
    assert sign_in(database_away, ADMIN_KEY).status_code == 302  # the admin key needs no database
    assert_console_unavailable(database_away.get("/console/projects"))


def assert_console_unavailable(page) -> None:
    assert (page.status_code, page.headers["Retry-After"]) == (503, str(RETRY_AFTER_SECONDS))
    assert page.content_type.startswith("text/html")
    assert "unavailable" in page.get_data(as_text=True)


def test_with_redis_away_what_needs_it_answers_503_and_sends_go_on_through_their_fallbacks(
    client, redis_away, engine, caplog
):
    """Pausing a provider for everyone, the providers' states and the digest live in Redis, with
    no fallback. A send has one for each use: who a key is comes from PostgreSQL, the daily
    quota is counted there, a limiter lets the request through, and the sweeper publishes
    what Redis did not take."""
    project = create_project(client, settings={"daily_quota": {"email": 10}})
    admin, key = bearer(ADMIN_KEY), bearer(project.live_key)
    with caplog.at_level(logging.WARNING):
        answers = [
            redis_away.post("/v1/admin/providers/fake/pause", json={"seconds": 60, "reason": "away"}, headers=admin),
            redis_away.get("/v1/admin/providers", headers=admin),
            redis_away.get("/v1/admin/digest", headers=admin),
        ]
    for answer in answers:
        assert_unavailable(answer)
    assert_logged_in_one_line(caplog, len(answers))
    assert sign_in(redis_away, ADMIN_KEY).status_code == 302
    assert_console_unavailable(redis_away.get("/console/operations"))
    states = {state["name"]: state for state in client.get("/v1/admin/providers", headers=admin).get_json()}
    assert states["fake"]["paused"] is False

    sent = redis_away.post("/v1/messages", json=email(), headers=key)
    assert sent.status_code == 202, sent.get_json()
    assert redis_away.post("/v1/messages/batch", json=BATCH, headers=key).status_code == 202
    assert redis_away.get(f"/v1/messages/{sent.get_json()['id']}", headers=key).status_code == 200
    assert rows(engine, project.id) == (2, 1)
