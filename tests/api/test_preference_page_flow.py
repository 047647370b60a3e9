"""The preference page end to end with a real worker: a message carries the subscriber's
`{{ preferences_url }}`, the subscriber follows it and turns a category off, and the next
message of that category is skipped while a required one still goes."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

import pytest
from sqlalchemy import text

from tests.api.preference_pages import SETTINGS, audience, read_form

pytestmark = pytest.mark.usefixtures("worker")

# The pages' settings without their quiet hours (22:00 to 07:00 Vienna): these tests wait for
# messages to be sent, which must not depend on the hour the suite runs at.
AT_ANY_HOUR = {name: value for name, value in SETTINGS.items() if name != "quiet_hours"}

TEMPLATE = {
    "key": "digest",
    "channel": "email",
    "subject": "Your digest",
    "text": "Hello {{ subscriber.email }}. Choose what you get: {{ preferences_url }}",
    "html": '<p>Choose what you get: <a href="{{ preferences_url }}">your preferences</a></p>',
}


def rendered_text(engine, message_id: str) -> str:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT text FROM message_contents WHERE message_id = CAST(:id AS uuid)"), {"id": message_id}
        ).scalar_one()


def send(project, category: str) -> str:
    body = {"channel": "email", "to": {"subscriber_id": "u1"}, "template": "digest", "category": category}
    answer = project.send(body)
    assert answer.status_code == 202, answer.get_json()
    return answer.get_json()["id"]


def test_turning_a_category_off_on_the_page_skips_the_next_message_of_it(client, engine, fake_provider):
    project = audience(client, AT_ANY_HOUR)
    assert project.call("POST", "/v1/templates", TEMPLATE).status_code == 201
    first = send(project, "news")
    assert project.wait_for(first)["status"] == "sent"
    body = rendered_text(engine, first)
    url = re.search(r"https?://\S+/p/[A-Za-z0-9_.-]+", body)
    assert url is not None, body
    path = urlsplit(url.group()).path

    form = read_form(client.get(path).get_data(as_text=True))
    assert form.checkboxes["category.news.email"] is True
    saved = client.post(path, data=form.submission(**{"category.news.email": False}))
    assert saved.status_code == 200

    skipped = project.wait_for(send(project, "news"))
    assert skipped["status"] == "skipped"
    assert skipped["events"][-1]["data"] == {"reason": "preference", "preference": "categories.news.email"}
    required = project.wait_for(send(project, "security"))
    assert required["status"] == "sent"
    assert fake_provider.count(skipped["id"]) == 0
    assert fake_provider.count(required["id"]) == 1


def test_the_link_in_a_message_is_that_subscribers(client, engine):
    project = audience(client, AT_ANY_HOUR)
    assert project.call("PUT", "/v1/subscribers/u2", {"email": "bob@example.com"}).status_code == 201
    assert project.call("POST", "/v1/templates", TEMPLATE).status_code == 201
    ids = {}
    for subscriber in ("u1", "u2"):
        body = {"channel": "email", "to": {"subscriber_id": subscriber}, "template": "digest", "category": "news"}
        ids[subscriber] = project.send(body).get_json()["id"]
    for subscriber, message_id in ids.items():
        assert project.wait_for(message_id)["status"] == "sent"
        url = re.search(r"https?://\S+/p/[A-Za-z0-9_.-]+", rendered_text(engine, message_id))
        assert url is not None
        page = client.get(urlsplit(url.group()).path).get_data(as_text=True)
        assert f"For {'ada' if subscriber == 'u1' else 'bob'}@example.com" in page


def test_a_message_to_a_raw_address_has_no_preference_link_and_says_so(client):
    project = audience(client, AT_ANY_HOUR)
    assert project.call("POST", "/v1/templates", TEMPLATE).status_code == 201
    body = {
        "channel": "email",
        "to": {"email": "raw@example.com"},
        "template": "digest",
        "data": {"subscriber": {"email": "raw@example.com"}},
    }
    message = project.wait_for(project.send(body).get_json()["id"])
    assert message["status"] == "failed"
    assert "'preferences_url' is undefined" in message["events"][-1]["data"]["reason"]
