"""Remembered callers: trusted only while the key generation in Redis is unchanged."""

from __future__ import annotations

import logging

import pytest
import redis
from sqlalchemy import text

from app import remembered
from app.access.auth import PREFIX_LENGTH, hash_key
from app.access.caller_cache import CallerCache
from app.db import session_factory
from app.redis_client import redis_for
from app.remembered import forget_all
from app.runtime.embedded import free_port
from tests.conftest import ADMIN_KEY


def revoke_behind_the_cache(engine, project_id: str) -> None:
    """Revoke in SQL, as no service would: nothing tells the cache."""
    with engine.begin() as connection:
        connection.execute(text("UPDATE api_keys SET revoked_at = now() WHERE project_id = :id"), {"id": project_id})


@pytest.fixture
def callers(migrated) -> CallerCache:
    return CallerCache(session_factory(migrated.database_url), redis_for(migrated.redis_url))


def test_a_caller_is_remembered_until_the_generation_changes(callers, project, engine, migrated):
    assert callers.caller(project.live_key).project_id == project.id
    revoke_behind_the_cache(engine, project.id)
    assert callers.caller(project.live_key).project_id == project.id
    forget_all(redis_for(migrated.redis_url))
    assert callers.caller(project.live_key) is None


def test_an_unknown_key_is_not_remembered(callers, project, engine):
    token = "tid_live_valid-from-the-next-request-on"
    assert callers.caller(token) is None
    with engine.begin() as connection:  # the key appears, and nothing tells the cache
        connection.execute(
            text(
                "INSERT INTO api_keys (project_id, name, kind, prefix, key_hash) "
                "VALUES (:project, 'late', 'live', :prefix, :hash)"
            ),
            {"project": project.id, "prefix": token[:PREFIX_LENGTH], "hash": hash_key(token)},
        )
    assert callers.caller(token).project_id == project.id


def test_a_remembered_caller_expires(callers, project, engine, monkeypatch):
    assert callers.caller(project.live_key) is not None
    monkeypatch.setattr(remembered, "MAX_AGE_SECONDS", 0.0)
    revoke_behind_the_cache(engine, project.id)
    assert callers.caller(project.live_key) is None


def test_without_redis_every_lookup_asks_postgresql(migrated, project, engine, caplog):
    unreachable = redis.Redis(port=free_port(), socket_connect_timeout=0.2, socket_timeout=0.2)
    callers = CallerCache(session_factory(migrated.database_url), unreachable)
    assert callers.caller(project.live_key).project_id == project.id
    revoke_behind_the_cache(engine, project.id)
    assert callers.caller(project.live_key) is None
    with caplog.at_level(logging.WARNING, logger="app.remembered"):
        forget_all(unreachable)  # logged, not raised: the revocation is committed whatever Redis says
    assert "could not publish a new generation" in caplog.text


def test_a_project_is_remembered_apart_from_keys(callers, project, client, migrated):
    """What subscriber tokens act as; a project id sent as a key must not find it."""
    assert callers.project_caller(project.id).project_id == project.id
    assert callers.caller(project.id) is None
    assert (
        client.delete(f"/v1/admin/projects/{project.id}", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).status_code
        == 204
    )
    assert callers.project_caller(project.id) is None


def test_a_request_reads_the_generation_once_and_a_stream_asks_afresh(callers, app, project, engine, migrated):
    """What a request looks up is stamped with the generation it began with; a stream's
    heartbeat check, long after, reads it again so a revocation ends the stream."""
    with app.test_request_context():
        assert callers.caller(project.live_key).project_id == project.id
        revoke_behind_the_cache(engine, project.id)
        forget_all(redis_for(migrated.redis_url))
        assert callers.caller(project.live_key).project_id == project.id
        assert callers.caller(project.live_key, fresh=True) is None
