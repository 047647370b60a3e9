"""The console's subscribers, batches and webhooks pages through the Flask test client."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from sqlalchemy import text

from tests.conftest import create_project
from tests.console.conftest import sign_in, token

SCRIPT = "<script>alert(1)</script>"


def later() -> str:
    return (datetime.now(UTC) + timedelta(hours=1)).isoformat()


def test_a_subscribers_profile_topics_preferences_and_suppressions(client, project):
    profile = {"email": "Ada@Example.com", "phone": "+447700900123", "data": {"note": SCRIPT}}
    assert project.call("PUT", "/v1/subscribers/ada", profile).status_code == 201
    project.call("POST", "/v1/suppressions", {"channel": "email", "address": "ada@example.com"})
    project.call("PUT", "/v1/topics/apollo-board", {"name": "Apollo"})
    project.call("POST", "/v1/topics/apollo-board/subscribers", {"subscriber_ids": ["ada"]})
    sign_in(client, project.live_key)
    listed = client.get("/console/subscribers").get_data(as_text=True)
    assert 'href="/console/subscribers/ada"' in listed
    for wanted in ("ada", "ADA@example.com", "+447700900123"):
        found = client.get(f"/console/subscribers?q={quote(wanted)}").get_data(as_text=True)
        assert re.findall(r'href="/console/subscribers/([^"]+)"', found) == ["ada"], wanted
    assert "No subscriber has that" in client.get("/console/subscribers?q=nobody").get_data(as_text=True)
    page = client.get("/console/subscribers/ada").get_data(as_text=True)
    assert SCRIPT not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "email ada@example.com: manual" in page
    assert re.findall(r'<ul id="topics">\s*<li>([^<]+)</li>', page) == ["apollo-board"]
    switches = {"channels": {"sms": False}, "categories": {}, "quiet_hours": None}
    saved = client.post(
        "/console/subscribers/ada/preferences", data={"csrf_token": token(client), "preferences": json.dumps(switches)}
    )
    assert saved.status_code == 302
    assert project.call("GET", "/v1/subscribers/ada/preferences").get_json()["channels"] == {"sms": False}
    client.post("/console/subscribers/ada/preferences", data={"csrf_token": token(client), "preferences": "[1]"})
    assert project.call("GET", "/v1/subscribers/ada/preferences").get_json()["channels"] == {"sms": False}


def test_erasure_needs_the_id_typed_again(client, project):
    assert project.call("PUT", "/v1/subscribers/bob", {"email": "bob@example.com"}).status_code == 201
    sign_in(client, project.live_key)
    client.post("/console/subscribers/bob/erase", data={"csrf_token": token(client), "confirm": "bo"})
    assert project.call("GET", "/v1/subscribers/bob").status_code == 200
    erased = client.post("/console/subscribers/bob/erase", data={"csrf_token": token(client), "confirm": "bob"})
    assert erased.status_code == 302
    assert project.call("GET", "/v1/subscribers/bob").status_code == 404


def test_another_projects_subscriber_is_404(client, project):
    other = create_project(client)
    assert other.call("PUT", "/v1/subscribers/theirs", {"email": "t@example.com"}).status_code == 201
    sign_in(client, project.live_key)
    assert "theirs" not in client.get("/console/subscribers").get_data(as_text=True)
    assert client.get("/console/subscribers/theirs").status_code == 404
    form = token(client)
    assert (
        client.post("/console/subscribers/theirs/erase", data={"csrf_token": form, "confirm": "theirs"}).status_code
        == 404
    )
    assert other.call("GET", "/v1/subscribers/theirs").status_code == 200


def test_a_batch_shows_its_progress_and_polls_it(client, project):
    body = {
        "channel": "email",
        "recipients": [{"email": f"r{i}@example.com"} for i in range(3)],
        "content": {"subject": "All", "text": "Hi"},
        "scheduled_at": later(),
    }
    accepted = project.call("POST", "/v1/messages/batch", body)
    assert accepted.status_code == 202, accepted.get_json()
    batch_id = accepted.get_json()["batch_id"]
    sign_in(client, project.live_key)
    page = client.get(f"/console/batches/{batch_id}").get_data(as_text=True)
    assert re.search(r'data-status="scheduled"><td>scheduled</td><td class="count">3</td>', page)
    assert "progress.js" in page
    assert client.get(f"/console/batches/{batch_id}/progress").get_json() == {"counts": {"scheduled": 3}, "accepted": 3}
    other = create_project(client)
    assert client.get(f"/console/batches?id={batch_id}").headers["Location"].endswith(f"/console/batches/{batch_id}")
    sign_in(client, other.live_key)
    assert client.get(f"/console/batches/{batch_id}").status_code == 404
    assert client.get(f"/console/batches/{batch_id}/progress").status_code == 404


def test_webhook_endpoints_deliveries_replay_and_rotation(client, project, engine):
    made = project.call("POST", "/v1/webhooks", {"url": "http://127.0.0.1:9/hook"})
    assert made.status_code == 201, made.get_json()
    endpoint = made.get_json()
    with engine.begin() as connection:
        delivery_id = connection.execute(
            text(
                "INSERT INTO webhook_deliveries (endpoint_id, project_id, status, events, attempts, next_attempt_at) "
                "VALUES (:e, :p, 'failed', CAST(:events AS jsonb), 5, NULL) RETURNING id::text"
            ),
            {"e": endpoint["id"], "p": project.id, "events": json.dumps([{"type": "sent", "data": {"x": SCRIPT}}])},
        ).scalar_one()
    sign_in(client, project.live_key)
    assert "http://127.0.0.1:9/hook" in client.get("/console/webhooks").get_data(as_text=True)
    page = client.get(f"/console/webhooks/{endpoint['id']}").get_data(as_text=True)
    assert f"/deliveries/{delivery_id}/replay" in page and ">failed<" in page
    replayed = client.post(
        f"/console/webhooks/{endpoint['id']}/deliveries/{delivery_id}/replay", data={"csrf_token": token(client)}
    )
    assert replayed.status_code == 302
    with engine.connect() as connection:
        status = connection.execute(
            text("SELECT status FROM webhook_deliveries WHERE id = :id"), {"id": delivery_id}
        ).scalar_one()
    assert status in ("pending", "sending", "retrying")  # failed no more: sent again (a worker may be at it)
    rotated = client.post(f"/console/webhooks/{endpoint['id']}/rotate", data={"csrf_token": token(client)})
    assert rotated.status_code == 200
    secret = re.search(r'<code id="secret">(whsec_[^<]+)</code>', rotated.get_data(as_text=True)).group(1)
    assert secret != endpoint["secret"] and secret not in rotated.headers.get("Set-Cookie", "")
    assert project.call("GET", f"/v1/webhooks/{endpoint['id']}").get_json()["previous_secret_expires_at"] is not None
    other = create_project(client)
    sign_in(client, other.live_key)
    assert client.get(f"/console/webhooks/{endpoint['id']}").status_code == 404
    assert (
        client.post(f"/console/webhooks/{endpoint['id']}/rotate", data={"csrf_token": token(client)}).status_code == 404
    )
