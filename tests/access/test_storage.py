"""A send's stored bytes as admission measures them are what PostgreSQL's count finds, so the
storage quota's fallback count (app/access/quota.py) agrees with what Redis counted."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

from app.access.quota import COUNT_BYTES
from tests.conftest import bearer, create_project


def test_the_measure_of_sends_is_postgresqls_count_of_what_they_stored(client, engine):
    """Scheduled for tomorrow, so no worker renders (and so rewrites) their words meanwhile."""
    project = create_project(client)
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    content = {"subject": "Grüße", "text": "Hallo 👋 " * 20, "html": "<p>Hallo</p>"}
    file = {"filename": "a.pdf", "content_type": "application/pdf", "content": base64.b64encode(b"%PDF" * 99).decode()}
    single = {
        "channel": "email",
        "to": {"email": "ada@example.com"},
        "content": content,
        "data": {"name": "Ada", "n": [1, 2.5, None, True]},
        "metadata": {"order": "A-17"},
        "cc": ["bo@example.com"],
        "attachments": [file],
        "scheduled_at": later,
    }
    batch = {
        "channel": "email",
        "content": content,
        "data": {"issue": 12},
        "attachments": [file],
        "scheduled_at": later,
        "recipients": [{"email": f"r{n}@example.com", "data": {"name": f"Zoë {n}"}} for n in range(3)]
        + [{"email": "plain@example.com"}],
    }
    key = bearer(project.test_key)
    assert client.post("/v1/messages", json=single, headers=key).status_code == 202
    answer = client.post("/v1/messages/batch", json=batch, headers=key)
    assert answer.status_code == 202, answer.get_json()
    counted = int(answer.headers["X-Storage-Quota-Limit"]) - int(answer.headers["X-Storage-Quota-Remaining"])
    now = datetime.now(UTC)
    day = {"start": now - timedelta(days=1), "end": now + timedelta(days=1)}
    with engine.connect() as connection:
        found = connection.scalar(COUNT_BYTES, {"project": project.id, "test": True, **day})
    assert counted == found
