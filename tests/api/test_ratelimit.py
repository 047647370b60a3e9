"""The per-project API rate limit: shared in Redis, with headers, failing open."""

from __future__ import annotations

from sqlalchemy import text

from app.api import create_app
from app.config import Settings
from app.embedded import EmbeddedRedis
from tasks.celery_app import configure
from tests.conftest import create_project, email, make_env


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


def test_redis_down_lets_requests_through_and_keeps_the_row(app, engine, server_urls):
    """With Redis gone the limiter fails open and the send is still committed (202)."""
    redis_server = EmbeddedRedis().start()
    down_app = create_app(Settings.from_env(make_env(server_urls[0], redis_server.url)))
    try:
        project = create_project(down_app.test_client(), rate_limit_per_min=1)
        redis_server.stop(kill=True)
        answers = [project.send(email()) for _ in range(3)]
        assert [a.status_code for a in answers] == [202, 202, 202]
        assert "RateLimit-Limit" not in answers[0].headers
        with engine.connect() as connection:
            statuses = (
                connection.execute(
                    text("SELECT status FROM messages WHERE project_id = :p"), {"p": project.id}
                )
                .scalars()
                .all()
            )
        assert statuses == ["accepted"] * 3
        assert down_app.test_client().get("/readyz").status_code == 503
    finally:
        redis_server.stop()
        configure(app.extensions["tidings"].settings)
