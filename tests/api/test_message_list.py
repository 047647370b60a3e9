"""Listing messages (newest first, keyset pages, filters) and cancelling them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from tests.conftest import email


def later() -> str:
    return (datetime.now(UTC) + timedelta(hours=1)).isoformat()


def test_list_is_newest_first_in_pages(project):
    ids = [project.send(email(f"#{i}", scheduled_at=later())).get_json()["id"] for i in range(5)]
    seen, cursor = [], None
    while True:
        query = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = project.client.get(f"/v1/messages{query}", headers={"Authorization": f"Bearer {project.live_key}"})
        assert page.status_code == 200
        body = page.get_json()
        assert len(body["items"]) <= 2
        assert all("events" not in item for item in body["items"])
        seen += [item["id"] for item in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))


def test_list_filters_by_status_and_channel(project, engine):
    dead = project.send(email(scheduled_at=later())).get_json()["id"]
    project.send(email(scheduled_at=later()))
    with engine.begin() as connection:
        connection.execute(text("UPDATE messages SET status = 'dead' WHERE id = :id"), {"id": dead})
    headers = {"Authorization": f"Bearer {project.live_key}"}
    dead_letters = project.client.get("/v1/messages?status=dead", headers=headers).get_json()["items"]
    assert [m["id"] for m in dead_letters] == [dead]
    assert project.client.get("/v1/messages?channel=sms", headers=headers).get_json()["items"] == []


def test_list_shows_only_the_callers_project(client, project):
    from tests.conftest import create_project

    project.send(email(scheduled_at=later()))
    other = create_project(client)
    answer = client.get("/v1/messages", headers={"Authorization": f"Bearer {other.live_key}"})
    assert answer.get_json() == {"items": [], "next_cursor": None}


def test_list_rejects_bad_filters(project):
    headers = {"Authorization": f"Bearer {project.live_key}"}
    for query, field, code in (
        ("limit=501", "limit", 422),
        ("status=lost", "status", 422),
        ("cursor=garbage", "cursor", 400),
    ):
        answer = project.client.get(f"/v1/messages?{query}", headers=headers)
        assert answer.status_code == code, query
        assert field in answer.get_json()["errors"]["query"]


def test_cancel_before_the_claim(project):
    message_id = project.send(email(scheduled_at=later())).get_json()["id"]
    answer = project.client.post(
        f"/v1/messages/{message_id}/cancel", headers={"Authorization": f"Bearer {project.live_key}"}
    )
    assert answer.status_code == 200
    assert answer.get_json()["status"] == "cancelled"
    assert [e["type"] for e in answer.get_json()["events"]] == ["scheduled", "cancelled"]


def test_cancel_after_the_claim_is_409_with_the_status(project, engine):
    message_id = project.send(email(scheduled_at=later())).get_json()["id"]
    with engine.begin() as connection:
        connection.execute(text("UPDATE messages SET status = 'sending' WHERE id = :id"), {"id": message_id})
    answer = project.client.post(
        f"/v1/messages/{message_id}/cancel", headers={"Authorization": f"Bearer {project.live_key}"}
    )
    assert answer.status_code == 409
    assert answer.get_json()["errors"] == {"status": ["sending"]}


def test_cancel_another_projects_message_is_404(client, project):
    from tests.conftest import create_project

    message_id = project.send(email(scheduled_at=later())).get_json()["id"]
    other = create_project(client)
    answer = client.post(f"/v1/messages/{message_id}/cancel", headers={"Authorization": f"Bearer {other.live_key}"})
    assert answer.status_code == 404
    assert project.get(message_id).get_json()["status"] == "scheduled"


def test_list_filters_by_recipient_and_template(project):
    made = project.call("POST", "/v1/templates", {"key": "welcome", "channel": "email", "subject": "Hi", "text": "Yo"})
    assert made.status_code == 201, made.get_json()
    templated = project.send(
        {"channel": "email", "to": {"email": "ada@example.com"}, "template": "welcome", "scheduled_at": later()}
    ).get_json()["id"]
    other = project.send(email(to="bob@example.com", scheduled_at=later())).get_json()["id"]
    headers = {"Authorization": f"Bearer {project.live_key}"}

    def listed(query: str) -> list[str]:
        return [m["id"] for m in project.client.get(f"/v1/messages?{query}", headers=headers).get_json()["items"]]

    assert listed("to=bob@example.com") == [other]
    assert listed("template=welcome") == [templated]
    assert listed("to=ada@example.com&template=welcome") == [templated]
    assert listed("to=carol@example.com") == []
