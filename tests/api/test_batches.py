"""Batches over HTTP: rows answered by index, the 10,000 limit, and the messages all the way
to the provider (a real worker, the `log` provider for SMS)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from providers.log import LogProvider
from tasks.fanout import fan_out
from tests.api.test_digest import digest, digest_counts
from tests.api.test_errors import assert_error_shape
from tests.conftest import bearer, create_project
from tests.waiting import wait_until

CONTENT = {"subject": "News", "text": "Issue 12"}


def batch(recipients: Any, **fields: Any) -> dict[str, Any]:
    """A valid email batch body to `recipients`."""
    return {"channel": "email", "content": CONTENT, "recipients": recipients, **fields}


def post_batch(project, body: Any, key: str | None = None, **headers: str):
    return project.client.post("/v1/messages/batch", json=body, headers={**bearer(key or project.live_key), **headers})


def stored(engine, project_id: str) -> dict[str, int]:
    """How many batches and messages the project has."""
    with engine.connect() as connection:
        row = connection.execute(
            text(
                """
                SELECT (SELECT count(*) FROM batches WHERE project_id = :p) AS batches,
                       (SELECT count(*) FROM messages WHERE project_id = :p) AS messages
                """
            ),
            {"p": project_id},
        ).one()
    return dict(row._mapping)


def wait_for_counts(project, batch_id: str, expected: dict[str, int], timeout: float = 30) -> dict[str, Any]:
    """The batch once its counts are `expected`; the test fails at the deadline with the counts it saw."""
    return wait_until(
        lambda: project.call("GET", f"/v1/batches/{batch_id}").get_json(),
        lambda answer: answer["counts"] == expected,
        timeout,
        f"batch {batch_id} counted {expected}",
        every=0.1,
        show=lambda answer: answer["counts"],
    )


def test_good_rows_are_sent_and_bad_rows_answered_by_index(project, engine):
    rows = [
        {"email": " Ada@Example.com "},
        {"email": "not-an-email"},
        {"phone": "+4915112345678"},
        "bo@example.com",
        {"email": "a@example.com", "subscriber_id": "u1"},
        {"email": "c@example.com", "name": "Cy"},
        {"subscriber_id": "u2", "data": {"name": "Di"}},
        {"email": "e@example.com", "data": ["x"]},
        {},
    ]
    answer = post_batch(project, batch(rows))
    assert answer.status_code == 202, answer.get_json()
    body = answer.get_json()
    assert body["accepted"] == 2
    assert body["rejected"] == [
        {"index": 1, "errors": {"email": ["Not a valid email address."]}},
        {"index": 2, "errors": {"phone": ["A email message goes to a subscriber_id or email, not phone."]}},
        {"index": 3, "errors": {"_schema": ["Invalid input type."]}},
        {"index": 4, "errors": {"_schema": ["Give exactly one of subscriber_id, email, phone, device_token, url."]}},
        {"index": 5, "errors": {"name": ["Unknown field."]}},
        {"index": 7, "errors": {"data": ["Not a valid mapping type."]}},
        {"index": 8, "errors": {"_schema": ["Give exactly one of subscriber_id, email, phone, device_token, url."]}},
    ]
    with engine.connect() as connection:
        messages = connection.execute(
            text(
                """
                SELECT m.to_address, m.subscriber_id, m.priority, c.subject, c.data
                FROM messages m JOIN message_contents c ON c.message_id = m.id
                WHERE m.batch_id = :b ORDER BY m.subscriber_id NULLS FIRST
                """
            ),
            {"b": body["batch_id"]},
        ).all()
    # Their statuses are the worker's business by now: u2 is no subscriber, so its message may
    # already have failed for want of an address.
    assert [tuple(m) for m in messages] == [
        ("ada@example.com", None, "bulk", "News", {}),
        (None, "u2", "bulk", "News", {"name": "Di"}),
    ]
    assert stored(engine, project.id) == {"batches": 1, "messages": 2}


@pytest.mark.parametrize(
    ("channel", "to"),
    [
        ("email", {"email": 42}),
        ("sms", {"phone": "0151 123"}),
        ("webhook", {"url": "ftp://example.com/hook"}),
        ("push", {"device_token": ""}),
        ("email", {"subscriber_id": "x" * 256}),
    ],
)
def test_a_row_is_checked_exactly_as_a_single_send_checks_to(project, channel, to):
    single = project.send({"channel": channel, "to": to, "content": {"text": "t", "subject": "s"}})
    batched = post_batch(project, {**batch([to, {"subscriber_id": "ok"}]), "channel": channel})
    assert batched.status_code == 202
    assert batched.get_json()["rejected"] == [{"index": 0, "errors": single.get_json()["errors"]["json"]["to"]}]


def test_ten_thousand_recipients_over_one_mebibyte_are_one_batch(client, project, engine):
    rows = [{"email": f"r{i:05}@example.com", "data": {"bio": "x" * 100}} for i in range(10_000)]
    answer = post_batch(project, batch(rows, scheduled_at="2099-01-01T00:00:00Z"))
    assert answer.status_code == 202, answer.get_json()
    assert answer.get_json()["accepted"] == 10_000
    assert answer.get_json()["rejected"] == []
    assert stored(engine, project.id) == {"batches": 1, "messages": 10_000}
    # COPY fires the statement trigger that keeps the digest's counts, like any insert.
    assert digest_counts(digest(client, project=project.id)) == {("email", "scheduled"): 10_000}


def test_more_than_ten_thousand_recipients_is_422_and_writes_nothing(project, engine):
    rows = [{"email": f"r{i:05}@example.com"} for i in range(10_001)]
    answer = post_batch(project, batch(rows))
    assert assert_error_shape(answer, 422)["errors"] == {"json": {"recipients": ["Give 1 to 10,000 recipients."]}}
    assert stored(engine, project.id) == {"batches": 0, "messages": 0}


def test_a_batch_without_a_valid_recipient_is_422_and_writes_nothing(project, engine):
    answer = post_batch(project, batch([{"email": "nope"}, {"phone": "+4915112345678"}]))
    payload = assert_error_shape(answer, 422)
    assert payload["message"] == "No recipient of the batch is valid."
    assert payload["errors"] == {
        "json": {
            "recipients": {
                "0": {"email": ["Not a valid email address."]},
                "1": {"phone": ["A email message goes to a subscriber_id or email, not phone."]},
            }
        }
    }
    assert stored(engine, project.id) == {"batches": 0, "messages": 0}


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {"channel": "email", "recipients": [{"email": "a@example.com"}]},
            {"content": ["Give either template or content, not both and not neither."]},
        ),
        (
            batch([{"email": "a@example.com"}], template="news"),
            {"content": ["Give either template or content, not both and not neither."]},
        ),
        (
            batch([{"email": "a@example.com"}], channel="fax"),
            {"channel": ["Must be one of: email, sms, push, webhook, in_app."]},
        ),
        (batch([]), {"recipients": ["Give 1 to 10,000 recipients."]}),
        (
            batch({"email": "a@example.com"}),
            {"recipients": {"email": ["Unknown field."], "topic": ["Missing data for required field."]}},
        ),
        (batch("everyone"), {"recipients": ['Give a list of recipients or {"topic": key}.']}),
        (batch({"topic": "no spaces"}), {"recipients": {"topic": ["Use 1 to 128 of A-Z, a-z, 0-9, _ . and -."]}}),
        (batch({"topic": "nobody-follows"}), {"recipients": {"topic": ["No topic 'nobody-follows'."]}}),
        ({"channel": "email", "content": CONTENT}, {"recipients": ["Missing data for required field."]}),
        (
            batch([{"email": "a@example.com"}], priority="urgent"),
            {"priority": ["Must be one of: transactional, bulk."]},
        ),
        (
            {"channel": "email", "template": "missing", "recipients": [{"email": "a@example.com"}]},
            {"template": ["Unknown template 'missing'."]},
        ),
    ],
)
def test_invalid_shared_fields_are_422_with_field_errors(project, engine, body, errors):
    payload = assert_error_shape(post_batch(project, body), 422)
    assert payload["errors"]["json"] == errors
    assert stored(engine, project.id) == {"batches": 0, "messages": 0}


def test_a_channel_the_project_does_not_use_is_422(client, engine):
    email_only = create_project(client, channels=["email"])
    answer = post_batch(
        email_only, {"channel": "sms", "content": {"text": "t"}, "recipients": [{"phone": "+4915112345678"}]}
    )
    assert assert_error_shape(answer, 422)["errors"]["json"] == {
        "channel": ["The sms channel is not enabled for this project."]
    }
    assert stored(engine, email_only.id) == {"batches": 0, "messages": 0}


def test_a_test_key_makes_test_messages(project, engine):
    body = post_batch(project, batch([{"email": "a@example.com"}]), key=project.test_key).get_json()
    assert project.call("GET", f"/v1/batches/{body['batch_id']}").get_json()["test"] is True
    with engine.connect() as connection:
        tests = connection.scalars(text("SELECT test FROM messages WHERE batch_id = :b"), {"b": body["batch_id"]}).all()
    assert tests == [True]


@pytest.mark.usefixtures("worker")
def test_each_recipients_data_is_merged_over_the_shared_data_when_rendered(project):
    project.call(
        "POST", "/v1/templates", {"key": "issue", "channel": "sms", "text": "Issue {{ issue }} for {{ name }}"}
    )
    project.call("PUT", "/v1/subscribers/bo", {"phone": "+4915100000002"})
    rows = [
        {"phone": "+4915100000001", "data": {"name": "Ada"}},
        {"subscriber_id": "bo", "data": {"name": "Bo", "issue": 13}},
        {"phone": "+4915100000003"},
    ]
    body = post_batch(
        project, {"channel": "sms", "template": "issue", "data": {"issue": 12, "name": "friend"}, "recipients": rows}
    ).get_json()
    assert wait_for_counts(project, body["batch_id"], {"sent": 3})["counts"] == {"sent": 3}
    ids = {m["id"] for m in project.call("GET", f"/v1/messages?batch_id={body['batch_id']}").get_json()["items"]}
    sent = {outbound.to: outbound.text for outbound in LogProvider.record if outbound.message_id in ids}
    assert sent == {
        "+4915100000001": "Issue 12 for Ada",
        "+4915100000002": "Issue 13 for Bo",
        "+4915100000003": "Issue 12 for friend",
    }


@pytest.mark.usefixtures("worker")
def test_a_batch_is_counted_by_status_until_all_are_sent(project):
    rows = [{"phone": f"+49151000{i:05}"} for i in range(1_200)]
    body = post_batch(project, {"channel": "sms", "content": {"text": "Hi"}, "recipients": rows}).get_json()
    answer = wait_for_counts(project, body["batch_id"], {"sent": 1_200})
    assert answer["counts"] == {"sent": 1_200}
    assert answer["id"] == body["batch_id"]
    assert (answer["channel"], answer["priority"], answer["accepted"], answer["rejected"]) == ("sms", "bulk", 1_200, 0)
    assert answer["test"] is False


@pytest.mark.usefixtures("worker")
def test_a_scheduled_batch_waits_while_later_ones_go_out(project):
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    sms = {"channel": "sms", "content": {"text": "Hi"}}
    scheduled = post_batch(project, {**sms, "scheduled_at": later, "recipients": [{"phone": "+4915100000001"}]})
    now = post_batch(project, {**sms, "recipients": [{"phone": "+4915100000002"}]})
    assert wait_for_counts(project, now.get_json()["batch_id"], {"sent": 1})["counts"] == {"sent": 1}
    answer = project.call("GET", f"/v1/batches/{scheduled.get_json()['batch_id']}").get_json()
    assert answer["counts"] == {"scheduled": 1}
    assert answer["scheduled_at"] is not None


def test_another_projects_batch_is_404(client, project):
    body = post_batch(project, batch([{"email": "a@example.com"}])).get_json()
    other = create_project(client)
    assert_error_shape(other.call("GET", f"/v1/batches/{body['batch_id']}"), 404)
    assert_error_shape(project.call("GET", f"/v1/batches/{uuid.uuid4()}"), 404)
    assert_error_shape(project.call("GET", "/v1/batches/not-a-uuid"), 404)


def test_same_idempotency_key_and_body_replays_the_original_answer(project, engine):
    body = batch([{"email": "a@example.com"}, {"email": "bad"}])
    first = post_batch(project, body, **{"Idempotency-Key": "news-12"})
    again = post_batch(project, body, **{"Idempotency-Key": "news-12"})
    assert first.status_code == again.status_code == 202
    assert again.get_json() == first.get_json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert stored(engine, project.id) == {"batches": 1, "messages": 1}


def test_same_idempotency_key_with_another_body_is_409(project, engine):
    assert post_batch(project, batch([{"email": "a@example.com"}]), **{"Idempotency-Key": "k"}).status_code == 202
    conflict = post_batch(project, batch([{"email": "b@example.com"}]), **{"Idempotency-Key": "k"})
    assert (
        assert_error_shape(conflict, 409)["message"] == "This Idempotency-Key was used with a different request body."
    )
    assert stored(engine, project.id) == {"batches": 1, "messages": 1}


def test_the_test_key_and_the_live_key_have_their_own_idempotency_keys(project, engine):
    body = batch([{"email": "a@example.com"}])
    key = {"Idempotency-Key": "news-13"}
    live = post_batch(project, body, **key)
    test = post_batch(project, body, key=project.test_key, **key)
    assert live.status_code == test.status_code == 202
    assert "Idempotent-Replayed" not in test.headers
    assert live.get_json()["batch_id"] != test.get_json()["batch_id"]
    assert post_batch(project, body, key=project.test_key, **key).get_json() == test.get_json()
    other = batch([{"email": "b@example.com"}])
    assert post_batch(project, other, key=project.test_key, **{"Idempotency-Key": "news-14"}).status_code == 202
    assert post_batch(project, body, **{"Idempotency-Key": "news-14"}).status_code == 202
    assert stored(engine, project.id) == {"batches": 4, "messages": 4}


def test_overlong_idempotency_key_is_422(project):
    answer = post_batch(project, batch([{"email": "a@example.com"}]), **{"Idempotency-Key": "k" * 256})
    assert assert_error_shape(answer, 422)["errors"] == {"headers": {"Idempotency-Key": ["Use 1 to 255 characters."]}}


def test_body_over_sixteen_mebibytes_is_413(project, engine):
    body = batch([{"email": "a@example.com", "data": {"bio": "x" * (16 * 1024 * 1024)}}])
    assert_error_shape(post_batch(project, body), 413)
    assert stored(engine, project.id) == {"batches": 0, "messages": 0}


def test_malformed_json_is_400_and_other_bodies_415(client, project):
    headers = bearer(project.live_key)
    malformed = client.post("/v1/messages/batch", data="{not json", content_type="application/json", headers=headers)
    assert assert_error_shape(malformed, 400)["errors"] == {"json": ["Invalid JSON body."]}
    assert_error_shape(client.post("/v1/messages/batch", data="channel=email", headers=headers), 415)


def test_openapi_spec_describes_both_routes(client):
    spec = client.get("/openapi.json").get_json()
    send = spec["paths"]["/v1/messages/batch"]["post"]
    assert "202" in send["responses"]
    assert "requestBody" in send
    assert "200" in spec["paths"]["/v1/batches/{batch_id}"]["get"]["responses"]
    recipient = spec["components"]["schemas"]["BatchRecipient"]["properties"]
    assert {"subscriber_id", "email", "phone", "device_token", "url", "data"} <= set(recipient)


def priorities(engine, batch_id: str) -> list[tuple[str, str, list[str]]]:
    """(id, priority, event types) of each of the batch's messages, by address (r0, r1, … as written)."""
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                """
                SELECT m.id::text, m.priority,
                       array(SELECT e.type FROM events e WHERE e.message_id = m.id ORDER BY e.id) AS events
                FROM messages m WHERE m.batch_id = CAST(:b AS uuid) ORDER BY m.to_address, m.subscriber_id
                """
            ),
            {"b": batch_id},
        ).all()
    return [(row.id, row.priority, list(row.events)) for row in rows]


def test_the_rows_of_a_transactional_batch_above_the_projects_rate_are_served_as_bulk(client, engine):
    """One decision for the whole batch: the rows that fit the project's transactional messages
    a minute keep the priority, the rest are written as bulk, each with a `demoted` event."""
    project = create_project(client, settings={"transactional_per_min": 3})
    recipients = [{"email": f"r{n}@example.com"} for n in range(5)]
    answer = post_batch(project, batch(recipients, priority="transactional"))
    assert answer.status_code == 202, answer.get_json()
    assert answer.get_json()["accepted"] == 5
    written = priorities(engine, answer.get_json()["batch_id"])
    assert [(priority, events) for _, priority, events in written] == [
        *[("transactional", [])] * 3,
        *[("bulk", ["demoted"])] * 2,
    ]
    (event,) = [e for e in project.get(written[-1][0]).get_json()["events"] if e["type"] == "demoted"]
    assert event["data"] == {"reason": "transactional_rate", "priority": "bulk", "limit_per_min": 3}
    # The minute's room is spent: the next batch's rows all go as bulk.
    again = post_batch(project, batch(recipients[:1], priority="transactional")).get_json()
    assert [priority for _, priority, _ in priorities(engine, again["batch_id"])] == ["bulk"]


def test_a_transactional_topic_send_above_the_projects_rate_is_fanned_out_as_bulk(client, engine):
    from tests.api.test_topics import make_topic  # it imports this module

    project = create_project(client, settings={"transactional_per_min": 1})
    make_topic(project, "news", members=["u1", "u2"])
    body = {"channel": "sms", "content": {"text": "Hi"}, "recipients": {"topic": "news"}, "priority": "transactional"}
    answer = post_batch(project, body)
    assert answer.status_code == 202, answer.get_json()
    batch_id = answer.get_json()["batch_id"]
    assert project.call("GET", f"/v1/batches/{batch_id}").get_json()["priority"] == "bulk"
    fan_out(batch_id)  # as a worker would; a repeat of it by one writes nothing
    assert [(priority, events) for _, priority, events in priorities(engine, batch_id)] == [("bulk", ["demoted"])] * 2
    (event,) = [
        e for e in project.get(priorities(engine, batch_id)[0][0]).get_json()["events"] if e["type"] == "demoted"
    ]
    assert event["data"] == {"reason": "transactional_rate", "priority": "bulk", "limit_per_min": 1}
