"""The console's message log and message page: filters, paging, the timeline, cancel, another
project's message, and tenant text shown as text, never run."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

from sqlalchemy import text

from app.console.messages import CONTENT_CSP
from tests.conftest import ADMIN_KEY, create_project, email
from tests.console.conftest import csrf_of, sign_in, token

SCRIPT = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def later() -> str:
    return (datetime.now(UTC) + timedelta(hours=1)).isoformat()


def listed_ids(page_text: str) -> list[str]:
    return re.findall(r'href="/console/messages/([0-9a-f-]{36})"', page_text)


def test_the_log_lists_the_projects_messages_with_filters_and_pages(client, project):
    ids = [
        project.send(email(f"#{i}", to=f"r{i % 2}@example.com", scheduled_at=later())).get_json()["id"]
        for i in range(5)
    ]
    sign_in(client, project.live_key)
    everything = client.get("/console/messages").get_data(as_text=True)
    assert listed_ids(everything) == list(reversed(ids))
    to_one = client.get("/console/messages?to=r1@example.com").get_data(as_text=True)
    assert listed_ids(to_one) == [ids[3], ids[1]]
    assert listed_ids(client.get("/console/messages?status=sent").get_data(as_text=True)) == []
    assert listed_ids(client.get("/console/messages?channel=email&status=scheduled").get_data(as_text=True)) == list(
        reversed(ids)
    )
    since = (datetime.now(UTC) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M")
    assert listed_ids(client.get(f"/console/messages?since={since}").get_data(as_text=True)) == []


def test_the_log_pages_with_the_apis_cursor(client, project, monkeypatch):
    monkeypatch.setattr("app.console.messages.PAGE_SIZE", 2)
    ids = [project.send(email(f"#{i}", scheduled_at=later())).get_json()["id"] for i in range(3)]
    sign_in(client, project.live_key)
    first = client.get("/console/messages").get_data(as_text=True)
    assert listed_ids(first) == [ids[2], ids[1]]
    older = re.search(r'<a href="([^"]+)" rel="next">', first).group(1).replace("&amp;", "&")
    assert listed_ids(client.get(older).get_data(as_text=True)) == [ids[0]]


def test_a_bad_filter_is_shown_not_a_500(client, project):
    sign_in(client, project.live_key)
    page = client.get("/console/messages?batch_id=nope")
    assert page.status_code == 200
    assert "Not a valid UUID" in page.get_data(as_text=True)
    assert client.get("/console/messages?cursor=garbage").status_code == 400


def test_the_message_page_shows_timeline_content_and_cancels(client, project):
    sent = project.send(email("Your code", scheduled_at=later(), content={"subject": "Your code", "text": "1234"}))
    message_id = sent.get_json()["id"]
    sign_in(client, project.live_key)
    page = client.get(f"/console/messages/{message_id}").get_data(as_text=True)
    assert "scheduled" in page and "Your code" in page and "1234" in page
    assert f'action="/console/messages/{message_id}/cancel"' in page
    cancelled = client.post(f"/console/messages/{message_id}/cancel", data={"csrf_token": token(client)})
    assert cancelled.status_code == 302
    assert project.get(message_id).get_json()["status"] == "cancelled"
    again = client.get(f"/console/messages/{message_id}").get_data(as_text=True)
    assert "event-cancelled" in again and "/cancel" not in again
    refused = client.post(f"/console/messages/{message_id}/cancel", data={"csrf_token": token(client)})
    assert refused.status_code == 409 and "only messages no worker has claimed" in refused.get_data(as_text=True)


def test_another_projects_message_is_a_404_in_every_page(client, project):
    other = create_project(client)
    theirs = other.send(email("Theirs", scheduled_at=later())).get_json()["id"]
    sign_in(client, project.live_key)
    assert theirs not in client.get("/console/messages").get_data(as_text=True)
    assert client.get(f"/console/messages/{theirs}").status_code == 404
    assert client.get(f"/console/messages/{theirs}/content").status_code == 404
    assert client.post(f"/console/messages/{theirs}/cancel", data={"csrf_token": token(client)}).status_code == 404
    assert other.get(theirs).get_json()["status"] == "scheduled"


def test_only_the_admin_requeues_and_a_dead_letter_goes_again(client, project, engine):
    message_id = project.send(email(scheduled_at=later())).get_json()["id"]
    with engine.begin() as connection:
        connection.execute(text("UPDATE messages SET status = 'dead', attempts = 3 WHERE id = :id"), {"id": message_id})
    sign_in(client, project.live_key)
    assert "/requeue" not in client.get(f"/console/messages/{message_id}").get_data(as_text=True)
    assert client.post(f"/console/messages/{message_id}/requeue", data={"csrf_token": token(client)}).status_code == 403
    sign_in(client, ADMIN_KEY)
    admin_token = token_of(client, "/console/operations")
    client.post("/console/projects", data={"project": project.id, "csrf_token": admin_token})
    assert client.post(f"/console/messages/{message_id}/requeue", data={"csrf_token": admin_token}).status_code == 302
    message = project.get(message_id).get_json()
    assert message["attempts"] == 0 and "requeued" in [e["type"] for e in message["events"]]


def test_the_admin_requeues_an_unknown_message_warned_that_it_may_arrive_twice(client, project, engine):
    message_id = project.send(email(scheduled_at=later())).get_json()["id"]
    with engine.begin() as connection:
        connection.execute(text("UPDATE messages SET status = 'unknown' WHERE id = :id"), {"id": message_id})
    sign_in(client, ADMIN_KEY)
    admin_token = token_of(client, "/console/operations")
    client.post("/console/projects", data={"project": project.id, "csrf_token": admin_token})
    page = client.get(f"/console/messages/{message_id}").get_data(as_text=True)
    assert "/requeue" in page and "it may arrive twice" in page
    assert client.post(f"/console/messages/{message_id}/requeue", data={"csrf_token": admin_token}).status_code == 302
    requeued = [e for e in project.get(message_id).get_json()["events"] if e["type"] == "requeued"]
    assert len(requeued) == 1 and requeued[0]["data"]["warning"]


def token_of(client, path: str) -> str:
    return csrf_of(client.get(path))


def test_tenant_text_is_escaped_everywhere_on_the_message_page(client, project, engine):
    body = {
        "channel": "email",
        "to": {"email": "ada@example.com"},
        "content": {"subject": SCRIPT, "text": f"{SCRIPT}<img src=x onerror=alert(2)>", "html": f"<p>hi</p>{SCRIPT}"},
        "metadata": {"note": SCRIPT},
        "scheduled_at": later(),
    }
    message_id = project.send(body).get_json()["id"]
    with engine.begin() as connection:
        connection.execute(text("UPDATE messages SET error = :e WHERE id = :id"), {"e": SCRIPT, "id": message_id})
    sign_in(client, project.live_key)
    page = client.get(f"/console/messages/{message_id}").get_data(as_text=True)
    assert SCRIPT not in page and "<img src=x" not in page
    assert page.count(ESCAPED) >= 3  # subject, text, error (metadata is JSON-quoted as well)
    framed = client.get(f"/console/messages/{message_id}/content")
    assert framed.headers["Content-Security-Policy"] == CONTENT_CSP
    assert CONTENT_CSP.startswith("sandbox;") and "script-src" not in CONTENT_CSP
    assert framed.headers["X-Frame-Options"] == "SAMEORIGIN"
    assert 'sandbox=""' in page and f'src="/console/messages/{message_id}/content"' in page


def test_a_subscribers_id_and_recipient_are_escaped_in_the_log(client, project):
    external = '<img src=x onerror="alert(3)">'
    put = project.call("PUT", f"/v1/subscribers/{quote(external)}", {"email": "sub@example.com"})
    assert put.status_code in (200, 201), put.get_json()
    project.send(
        {
            "channel": "email",
            "to": {"subscriber_id": external},
            "content": {"subject": "s", "text": "t"},
            "scheduled_at": later(),
        }
    )
    sign_in(client, project.live_key)
    page = client.get("/console/messages").get_data(as_text=True)
    assert external not in page and "&lt;img src=x onerror=&#34;alert(3)&#34;&gt;" in page


def test_the_message_page_lists_the_webhook_deliveries_that_carried_it(client, project, engine):
    message_id = project.send(email(scheduled_at=later())).get_json()["id"]
    endpoint = project.call("POST", "/v1/webhooks", {"url": "http://127.0.0.1:9/hook"}).get_json()
    events = [{"type": "delivered", "data": {"message_id": message_id}}]
    unrelated = [{"type": "bounced", "data": {"message_id": "00000000-0000-0000-0000-000000000000"}}]
    with engine.begin() as connection:
        for carried, status in ((events, "succeeded"), (unrelated, "failed")):
            connection.execute(
                text(
                    "INSERT INTO webhook_deliveries (endpoint_id, project_id, status, events, attempts) "
                    "VALUES (:e, :p, :s, CAST(:events AS jsonb), 1)"
                ),
                {"e": endpoint["id"], "p": project.id, "s": status, "events": json.dumps(carried)},
            )
    sign_in(client, project.live_key)
    page = client.get(f"/console/messages/{message_id}").get_data(as_text=True)
    deliveries = page.split("<h2>Webhook deliveries</h2>")[1]
    assert "<td>succeeded</td>" in deliveries and "<td>delivered</td>" in deliveries
    assert "bounced" not in deliveries and "failed" not in deliveries


def test_operations_requeues_a_projects_dead_letters(client, project, engine):
    ids = [project.send(email(scheduled_at=later())).get_json()["id"] for _ in range(2)]
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE messages SET status = 'dead' WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
        )
    sign_in(client, ADMIN_KEY)
    form = token_of(client, "/console/operations")
    answer = client.post("/console/operations/dead-letters/requeue", data={"csrf_token": form, "project": project.id})
    assert answer.status_code == 302
    assert "Requeued 2 messages." in client.get("/console/operations").get_data(as_text=True)
    for message in (project.get(i).get_json() for i in ids):
        assert message["status"] != "dead" and "requeued" in [e["type"] for e in message["events"]]


def test_a_message_without_content_kept_still_has_its_page(client, project, engine):
    message_id = project.send(email("Gone soon", scheduled_at=later())).get_json()["id"]
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM message_contents WHERE message_id = :id"), {"id": message_id})
    sign_in(client, project.live_key)
    page = client.get(f"/console/messages/{message_id}")
    assert page.status_code == 200 and "Gone soon" not in page.get_data(as_text=True)
    assert client.get(f"/console/messages/{message_id}/content").get_data(as_text=True) == ""
