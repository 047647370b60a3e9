"""A project that sends through its own provider account receives that account's webhooks
at /v1/inbound/{provider}/{project}, verified with the settings it brought."""

from __future__ import annotations

import base64

import pytest

from tests.api.inbound.conftest import as_body, inbound_events, left_unknown, resend_headers, resolved, sent
from tests.conftest import ADMIN_KEY, bearer, create_project, email

ADMIN = bearer(ADMIN_KEY)
OWN_SECRET = "whsec_" + base64.b64encode(b"the project's own resend secret!").decode()


def delivered(email_id: str, message_id: str) -> bytes:
    return as_body(
        {
            "type": "email.delivered",
            "created_at": "2030-01-01T10:00:00Z",
            "data": {"email_id": email_id, "tags": {"tidings_message_id": message_id}},
        }
    )


@pytest.fixture
def own(inbound, project) -> str:
    settings = {"RESEND_API_KEY": "re_project", "EMAIL_FROM": "hello@project.test", "RESEND_WEBHOOK_SECRET": OWN_SECRET}
    answer = inbound.put(
        f"/v1/admin/projects/{project.id}/providers/resend", json={"settings": settings}, headers=ADMIN
    )
    assert answer.status_code == 201, answer.get_json()
    return f"/v1/inbound/resend/{project.id}"


def test_the_project_s_url_takes_its_own_signature(inbound, project, engine, own):
    message = sent(project, engine, "resend", "re-own-1", email())
    body = delivered("re-own-1", message)
    assert inbound.post(own, data=body, headers=resend_headers(body, secret=OWN_SECRET)).get_json()["applied"] == 1
    assert project.get(message).get_json()["status"] == "delivered"
    # The deployment's secret does not open the project's URL, nor the project's the deployment's.
    again = delivered("re-own-1", message)
    assert inbound.post(own, data=again, headers=resend_headers(again)).status_code == 401
    assert (
        inbound.post("/v1/inbound/resend", data=again, headers=resend_headers(again, secret=OWN_SECRET)).status_code
        == 401
    )


def test_the_project_s_url_reaches_only_the_project_s_messages(inbound, client, engine, own):
    other = create_project(client)
    theirs = sent(other, engine, "resend", "re-theirs", email())
    body = delivered("re-theirs", theirs)
    answer = inbound.post(own, data=body, headers=resend_headers(body, secret=OWN_SECRET))
    assert answer.get_json() == {"received": 1, "applied": 0, "duplicates": 0, "unmatched": 1}
    assert other.get(theirs).get_json()["status"] == "sent"
    assert inbound_events(other, theirs) == []


def test_a_project_s_account_cannot_settle_another_project_s_unknown_message(inbound, client, project, engine, own):
    """Our id in a tag is only as good as the account that echoes it: a project controls its
    own account's tags, so its URL reaches its own messages alone."""
    other = create_project(client)
    theirs = left_unknown(other, engine, "resend", email())
    mine = left_unknown(project, engine, "resend", email())
    for message in (theirs, mine):
        body = delivered("re-own-2", message)
        inbound.post(own, data=body, headers=resend_headers(body, secret=OWN_SECRET))
    assert resolved(other, theirs) == ("unknown", None, [])
    assert resolved(project, mine) == ("delivered", "re-own-2", [("delivered", "unknown")])


def test_a_project_without_its_own_account_has_no_url(inbound, client):
    other = create_project(client)
    body = delivered("x", "y")
    answer = inbound.post(f"/v1/inbound/resend/{other.id}", data=body, headers=resend_headers(body))
    assert answer.status_code == 404


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        # The deployment's sender is never lent to a project's own account.
        ({"RESEND_API_KEY": "re_project"}, "EMAIL_FROM is not set"),
        (
            {"RESEND_API_KEY": "re_project", "EMAIL_FROM": "a@b.test", "RESEND_WEBHOOK_SECRET": "plain"},
            "RESEND_WEBHOOK_SECRET must start with whsec_",
        ),
    ],
)
def test_settings_the_adapter_or_receiver_would_refuse_are_422(inbound, project, given, problem):
    answer = inbound.put(f"/v1/admin/projects/{project.id}/providers/resend", json={"settings": given}, headers=ADMIN)
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == {"settings": [problem]}
    assert inbound.get(f"/v1/admin/projects/{project.id}/providers/resend", headers=ADMIN).status_code == 404
