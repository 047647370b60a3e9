"""The per-project API rate limit: shared in Redis, with headers.

Failing open when Redis is down is proven with a real API process in tests/faults.
"""

from __future__ import annotations

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
