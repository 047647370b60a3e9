"""The suppression list over HTTP, and the function bounce and complaint handlers call."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest
from sqlalchemy.orm import Session

from app.enums import Channel, SuppressionReason
from app.services.suppressions import add_suppressions
from tests.conftest import create_project


def test_add_normalises_the_address_and_answers_201_then_200(project):
    created = project.call("POST", "/v1/suppressions", {"channel": "email", "address": "  Ada@Example.COM "})
    assert created.status_code == 201
    body = created.get_json()
    assert (body["channel"], body["address"], body["reason"], body["expires_at"]) == (
        "email",
        "ada@example.com",
        "manual",
        None,
    )
    until = (datetime.now(UTC) + timedelta(days=7)).isoformat()
    again = project.call(
        "POST",
        "/v1/suppressions",
        {"channel": "email", "address": "ADA@example.com", "reason": "complaint", "expires_at": until},
    )
    assert again.status_code == 200
    assert again.get_json()["reason"] == "complaint"
    assert again.get_json()["expires_at"] is not None


def test_list_filters_by_channel_and_pages(project):
    for address in ("c@example.com", "a@example.com", "b@example.com"):
        project.call("POST", "/v1/suppressions", {"channel": "email", "address": address})
    project.call("POST", "/v1/suppressions", {"channel": "sms", "address": "+4915112345678"})
    first = project.call("GET", "/v1/suppressions?channel=email&limit=2").get_json()
    assert [s["address"] for s in first["items"]] == ["a@example.com", "b@example.com"]
    rest = project.call("GET", f"/v1/suppressions?channel=email&limit=2&cursor={first['next_cursor']}")
    assert [s["address"] for s in rest.get_json()["items"]] == ["c@example.com"]
    everything = project.call("GET", "/v1/suppressions").get_json()["items"]
    assert [(s["channel"], s["address"]) for s in everything][-1] == ("sms", "+4915112345678")


def test_delete_by_channel_and_address_in_any_case(project):
    project.call("POST", "/v1/suppressions", {"channel": "email", "address": "ada@example.com"})
    assert project.call("DELETE", "/v1/suppressions/email/ADA@example.com").status_code == 204
    assert project.call("GET", "/v1/suppressions").get_json()["items"] == []
    assert project.call("DELETE", "/v1/suppressions/email/ada@example.com").status_code == 404
    assert project.call("DELETE", "/v1/suppressions/fax/ada@example.com").status_code == 404


def test_a_webhook_url_can_be_removed_percent_encoded(project):
    url = "https://hooks.example.com/a/b?c=d"
    project.call("POST", "/v1/suppressions", {"channel": "webhook", "address": url})
    assert project.call("DELETE", f"/v1/suppressions/webhook/{quote(url, safe='')}").status_code == 204
    assert project.call("GET", "/v1/suppressions").get_json()["items"] == []


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"channel": "email", "address": "nope"}, {"address": ["Not a valid email address."]}),
        ({"channel": "sms", "address": "0151"}, {"address": ["Not a valid E.164 phone number."]}),
        ({"channel": "email"}, {"address": ["Missing data for required field."]}),
        (
            {"channel": "email", "address": "a@example.com", "reason": "spite"},
            {"reason": ["Must be one of: bounce, complaint, unsubscribe, manual."]},
        ),
        (
            {"channel": "email", "address": "a@example.com", "expires_at": "2030-01-01T00:00:00"},
            {"expires_at": ["Not a valid aware datetime."]},
        ),
    ],
)
def test_bad_entries_are_422_and_write_nothing(project, body, errors):
    answer = project.call("POST", "/v1/suppressions", body)
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == errors
    assert project.call("GET", "/v1/suppressions").get_json()["items"] == []


def test_another_projects_suppressions_are_invisible(client, project):
    other = create_project(client)
    project.call("POST", "/v1/suppressions", {"channel": "email", "address": "ada@example.com"})
    assert other.call("GET", "/v1/suppressions").get_json()["items"] == []
    assert other.call("DELETE", "/v1/suppressions/email/ada@example.com").status_code == 404


def test_add_suppressions_upserts_a_set_in_the_callers_transaction(project, engine):
    with Session(engine) as session:
        rows = add_suppressions(
            session,
            project.id,
            Channel.EMAIL,
            ["A@example.com", "a@example.com ", "b@example.com"],
            SuppressionReason.BOUNCE,
        )
        assert sorted((r.address, r.created) for r in rows) == [
            ("a@example.com", True),
            ("b@example.com", True),
        ]
        session.rollback()
    assert project.call("GET", "/v1/suppressions").get_json()["items"] == [], "it never commits on its own"
    with Session(engine) as session, session.begin():
        add_suppressions(session, project.id, Channel.EMAIL, ["a@example.com"], SuppressionReason.BOUNCE)
    assert [s["reason"] for s in project.call("GET", "/v1/suppressions").get_json()["items"]] == ["bounce"]
