"""The pipeline end to end: HTTP → PostgreSQL → Celery worker → provider, on real parts."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from app.delivery import dispatch
from providers.log import LogProvider
from tasks.deliver import deliver
from tests.conftest import email
from tests.provider_server import json_response

pytestmark = pytest.mark.usefixtures("worker")


def test_a_send_reaches_the_provider_and_is_sent_with_its_timeline(project, fake_provider):
    message_id = project.send(email("Welcome")).get_json()["id"]
    message = project.wait_for(message_id)
    assert message["status"] == "sent"
    assert [event["type"] for event in message["events"]] == ["accepted", "ready", "sending", "sent"]
    times = [event["at"] for event in message["events"]]
    assert times == sorted(times)
    assert message["attempts"] == 1
    assert message["provider"] == "fake"
    assert message["provider_message_id"].startswith("fake-")
    assert message["sent_at"] is not None
    assert fake_provider.count(message_id) == 1
    assert [r.subject for r in fake_provider.delivered() if r.message_id == message_id] == ["Welcome"]


def test_a_test_key_never_reaches_the_configured_provider(project, fake_provider):
    message_id = project.send(email(), key=project.test_key).get_json()["id"]
    message = project.wait_for(message_id)
    assert message["status"] == "sent"
    assert message["provider"] == "log"
    assert fake_provider.count(message_id) == 0
    assert message_id in {outbound.message_id for outbound in LogProvider.record}
    assert message["events"][0]["data"] == {"test": True}
    assert message["events"][-1]["data"]["note"] == "test key: handled by the log provider, never a real provider"


def test_bulk_priority_goes_through_its_own_lanes(project):
    message_id = project.send(email(priority="bulk")).get_json()["id"]
    assert project.wait_for(message_id)["status"] == "sent"


def test_other_channels_go_to_their_configured_provider(project):
    body = {"channel": "sms", "to": {"phone": "+4915112345678"}, "content": {"text": "Your code is 1234"}}
    message = project.wait_for(project.send(body).get_json()["id"])
    assert message["status"] == "sent"
    assert message["provider"] == "log"
    assert message["to"] == {"phone": "+4915112345678"}


def test_a_subscriber_is_sent_to_its_address(project, engine):
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO subscribers (project_id, external_id, email) VALUES (:p, 'u42', 'u42@example.com')"),
            {"p": project.id},
        )
    body = {"channel": "email", "to": {"subscriber_id": "u42"}, "content": {"subject": "s", "text": "t"}}
    message = project.wait_for(project.send(body).get_json()["id"])
    assert message["status"] == "sent"
    assert message["to"] == {"email": "u42@example.com"}


def test_a_subscriber_without_an_address_fails_with_the_reason(project, fake_provider):
    body = {"channel": "email", "to": {"subscriber_id": "nobody"}, "content": {"subject": "s", "text": "t"}}
    message = project.wait_for(project.send(body).get_json()["id"])
    assert message["status"] == "failed"
    assert message["events"][-1]["type"] == "failed"
    assert message["events"][-1]["data"]["reason"] == "subscriber 'nobody' has no email address"
    assert fake_provider.count(message["id"]) == 0


def test_a_permanent_provider_error_fails_at_once(project, fake_provider):
    fake_provider.override = lambda request: json_response({"error": "invalid recipient"}, status=422)
    message = project.wait_for(project.send(email()).get_json()["id"])
    assert message["status"] == "failed"
    assert message["attempts"] == 1
    assert "invalid recipient" in message["error"]
    assert [e["type"] for e in message["events"]][-1] == "failed"


def test_a_per_message_rejection_fails_only_that_message(project, fake_provider):
    def reject(request):
        results = [
            {"id": m["id"], "status": "rejected", "error": "mailbox unavailable"}
            for m in request.get_json()["messages"]
        ]
        return json_response({"results": results})

    fake_provider.override = reject
    message = project.wait_for(project.send(email()).get_json()["id"])
    assert message["status"] == "failed"
    assert message["error"] == "mailbox unavailable"


def test_a_transient_provider_error_schedules_a_retry(project, fake_provider):
    fake_provider.override = lambda request: json_response({"error": "busy"}, status=503)
    message = project.wait_for(project.send(email()).get_json()["id"], statuses={"retrying"})
    assert message["status"] == "retrying"
    first_retry = next(e for e in message["events"] if e["type"] == "retrying")
    assert first_retry["data"]["attempt"] == 1
    assert "HTTP 503" in first_retry["data"]["reason"]
    wait = datetime.fromisoformat(first_retry["data"]["next_attempt_at"]) - datetime.fromisoformat(first_retry["at"])
    assert timedelta(0) <= wait <= timedelta(seconds=30)


def scheduled_then_ready(project, engine) -> str:
    """A message made ready by hand, so the test alone decides which deliver tasks run."""
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    message_id = project.send(email(scheduled_at=later)).get_json()["id"]
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = 'ready', provider = 'fake', to_address = 'ada@example.com', "
                "ready_at = now() WHERE id = :id"
            ),
            {"id": message_id},
        )
    return message_id


def test_a_duplicated_deliver_message_sends_once(project, engine, fake_provider):
    message_id = scheduled_then_ready(project, engine)
    for _ in range(3):
        for signature in dispatch.deliver("fake", "transactional", [message_id]):
            signature.apply_async()
    message = project.wait_for(message_id)
    assert message["status"] == "sent"
    assert message["attempts"] == 1
    assert fake_provider.count(message_id) == 1


def test_concurrent_delivers_of_the_same_ids_send_once(project, engine, fake_provider):
    ids = [scheduled_then_ready(project, engine) for _ in range(5)]
    start = threading.Barrier(4)

    def run() -> None:
        start.wait()
        deliver("fake", ids)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [fake_provider.count(i) for i in ids] == [1] * 5
    assert {project.get(i).get_json()["status"] for i in ids} == {"sent"}


def test_deliver_ignores_ids_that_do_not_exist(fake_provider):
    unknown = str(uuid.uuid4())
    deliver("fake", [unknown])
    assert fake_provider.count(unknown) == 0
