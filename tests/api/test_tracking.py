"""Open and click tracking and one-click unsubscribe (RFC 8058), from render to the click."""

from __future__ import annotations

import re
from html import unescape

import pytest
import requests
from itsdangerous import URLSafeSerializer

from app.content.tokens import Purpose, mint
from app.content.tracking import PIXEL
from providers.log import LogProvider
from tests.conftest import create_project

pytestmark = pytest.mark.usefixtures("worker")

HTML = (
    '<html><body><p>Hi</p><a href="https://example.com/a?x=1&amp;y=2">A</a> '
    "<a href='mailto:help@example.com'>mail</a></body></html>"
)
TRACKED = {"tracking": {"opens": True, "clicks": True}}


def html_email(**extra) -> dict:
    return {"channel": "email", "to": {"email": "ada@example.com"}, "content": {"subject": "s", "html": HTML}, **extra}


def sent_outbound(project, body: dict):
    """Send with the test key (the log provider keeps what it was given) and return that."""
    message_id = project.send(body, key=project.test_key).get_json()["id"]
    assert project.wait_for(message_id)["status"] == "sent"
    return message_id, next(o for o in LogProvider.record if o.message_id == message_id)


def tracked(client, settings=TRACKED):
    return create_project(client, settings=settings)


def links(html: str) -> list[str]:
    return [unescape(href) for href in re.findall(r"""href=["']([^"']+)""", html)]


def pixel_path(html: str) -> str:
    return re.search(r'<img src="http://[^/]+(/t/o/[^"]+)"', html).group(1)


def engagement(project, message_id: str) -> dict:
    return project.get(message_id).get_json()["engagement"]


def test_links_are_rewritten_and_a_pixel_added(client):
    project = tracked(client)
    _, outbound = sent_outbound(project, html_email())
    click, mail = links(outbound.html)
    assert click.startswith("http://127.0.0.1:8000/t/c/")
    assert mail == "mailto:help@example.com"
    assert outbound.html.index("/t/o/") < outbound.html.index("</body>")


def test_an_open_is_an_event_once_and_a_count_always(client):
    project = tracked(client)
    message_id, outbound = sent_outbound(project, html_email())
    for _ in range(3):
        answer = client.get(pixel_path(outbound.html))
        assert (answer.status_code, answer.mimetype, answer.data) == (200, "image/gif", PIXEL)
    assert engagement(project, message_id)["opens"] == 3
    assert [e["type"] for e in project.get(message_id).get_json()["events"]].count("opened") == 1


def test_a_click_redirects_to_the_original_url_and_is_recorded(client):
    project = tracked(client)
    message_id, outbound = sent_outbound(project, html_email())
    path = links(outbound.html)[0].removeprefix("http://127.0.0.1:8000")
    for _ in range(2):
        answer = client.get(path)
        assert (answer.status_code, answer.headers["Location"]) == (302, "https://example.com/a?x=1&y=2")
    assert engagement(project, message_id) == {
        "opens": 0,
        "clicks": 2,
        "links": [{"url": "https://example.com/a?x=1&y=2", "clicks": 2}],
    }
    clicked = [e for e in project.get(message_id).get_json()["events"] if e["type"] == "clicked"]
    assert [e["data"] for e in clicked] == [{"url": "https://example.com/a?x=1&y=2"}]


def test_forged_expired_and_foreign_tokens_change_nothing(client):
    project = tracked(client)
    other = create_project(client)
    message_id, _ = sent_outbound(project, html_email())
    assert client.get("/t/o/forged").status_code == 200  # the pixel never tells
    assert client.get("/t/c/forged").status_code == 404
    assert client.get(f"/t/o/{mint(Purpose.OPEN, {'p': project.id, 'm': message_id}, lifetime=-1)}").status_code == 200
    assert client.get(f"/t/o/{mint(Purpose.OPEN, {'p': other.id, 'm': message_id})}").status_code == 200
    assert client.get(f"/t/o/{mint(Purpose.CLICK, {'p': project.id, 'm': message_id})}").status_code == 200
    expired_click = mint(Purpose.CLICK, {"p": project.id, "m": message_id, "u": "https://example.com/"}, lifetime=-1)
    assert client.get(f"/t/c/{expired_click}").status_code == 302  # the link still works, unrecorded
    assert engagement(project, message_id) == {"opens": 0, "clicks": 0, "links": []}


def test_tracking_is_off_unless_switched_on(project):
    _, outbound = sent_outbound(project, html_email())
    assert outbound.html == HTML


def test_transactional_mail_may_stay_untracked_unless_its_template_says(client):
    project = tracked(client, {"tracking": {"opens": True, "clicks": True, "transactional": False}})
    _, transactional = sent_outbound(project, html_email())
    _, bulk = sent_outbound(project, html_email(priority="bulk"))
    assert transactional.html == HTML
    assert "/t/o/" in bulk.html
    template = {"key": "receipt", "channel": "email", "subject": "s", "html": HTML, "tracking": {"opens": True}}
    assert project.call("POST", "/v1/templates", template).get_json()["tracking"] == {"opens": True}
    body = {"channel": "email", "to": {"email": "ada@example.com"}, "template": "receipt"}
    _, templated = sent_outbound(project, body)
    assert "/t/o/" in templated.html
    assert "/t/c/" not in templated.html


def test_only_email_templates_take_tracking(project):
    template = {"key": "sms", "channel": "sms", "text": "t", "tracking": {"opens": True}}
    answer = project.call("POST", "/v1/templates", template)
    assert answer.status_code == 422
    assert "tracking" in answer.get_json()["errors"]["json"]


# -- one-click unsubscribe ------------------------------------------------------------------


@pytest.fixture
def ada(project):
    assert project.call("PUT", "/v1/subscribers/ada", {"email": "ada@example.com"}).status_code == 201
    return project


def to_ada(**extra) -> dict:
    return {"channel": "email", "to": {"subscriber_id": "ada"}, "content": {"subject": "s", "text": "t"}, **extra}


def unsubscribe_url(outbound) -> str:
    assert outbound.headers["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    return outbound.headers["List-Unsubscribe"].strip("<>")


def test_bulk_and_marketing_mail_carry_rfc_8058_headers(ada, client):
    _, bulk = sent_outbound(ada, to_ada(priority="bulk"))
    _, marketing = sent_outbound(ada, to_ada(category="marketing"))
    _, receipt = sent_outbound(ada, to_ada(category="receipts"))
    assert unsubscribe_url(bulk).startswith("http://127.0.0.1:8000/u/")
    assert unsubscribe_url(marketing).startswith("http://127.0.0.1:8000/u/")
    assert receipt.headers == {}
    required = create_project(client, settings={"required_categories": ["marketing"]})
    _, kept = sent_outbound(required, html_email(category="marketing", priority="bulk"))
    assert kept.headers == {}


def test_a_raw_one_click_post_turns_the_category_off(ada, live_api):
    message_id, outbound = sent_outbound(ada, to_ada(category="marketing"))
    url = unsubscribe_url(outbound).replace("http://127.0.0.1:8000", live_api)
    page = requests.get(url, timeout=10)
    assert page.status_code == 200 and '<form method="post">' in page.text
    assert page.headers["Content-Security-Policy"].startswith("default-src 'none'; form-action 'self'")
    assert (page.headers["X-Frame-Options"], page.headers["Cache-Control"]) == ("DENY", "no-store")
    assert ada.call("GET", "/v1/subscribers/ada/preferences").get_json()["categories"] == {}  # a GET changes nothing
    answer = requests.post(
        url,
        data="List-Unsubscribe=One-Click",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=10,
    )
    assert answer.status_code == 200
    assert ada.call("GET", "/v1/subscribers/ada/preferences").get_json()["categories"] == {
        "marketing": {"email": False}
    }
    unsubscribed = [e for e in ada.get(message_id).get_json()["events"] if e["type"] == "unsubscribed"]
    assert [e["data"] for e in unsubscribed] == [{"category": "marketing", "subscriber_id": "ada"}]
    again = requests.post(url, data="List-Unsubscribe=One-Click", timeout=10)
    assert again.status_code == 200
    assert len([e for e in ada.get(message_id).get_json()["events"] if e["type"] == "unsubscribed"]) == 1
    skipped = ada.wait_for(ada.send(to_ada(category="marketing")).get_json()["id"])
    assert skipped["status"] == "skipped"


def test_a_raw_address_is_suppressed(project, client):
    _, outbound = sent_outbound(project, html_email(priority="bulk"))
    path = unsubscribe_url(outbound).removeprefix("http://127.0.0.1:8000")
    answer = client.post(path, data={"List-Unsubscribe": "One-Click"})
    assert answer.status_code == 200
    [entry] = project.call("GET", "/v1/suppressions").get_json()["items"]
    assert (entry["address"], entry["reason"]) == ("ada@example.com", "unsubscribe")


def test_forged_expired_and_foreign_unsubscribe_tokens_change_nothing(ada, client):
    message_id, _ = sent_outbound(ada, to_ada(category="marketing"))
    other = create_project(client)
    claims = {"p": ada.id, "m": message_id, "c": "marketing", "s": "ada"}
    unsigned = ("forged", mint(Purpose.UNSUBSCRIBE, claims, lifetime=-1), mint(Purpose.CLICK, claims))
    for token in unsigned:
        assert client.get(f"/u/{token}").status_code == 404
    for token in (*unsigned, mint(Purpose.UNSUBSCRIBE, {**claims, "p": other.id})):
        assert client.post(f"/u/{token}", data={"List-Unsubscribe": "One-Click"}).status_code == 404
    assert ada.call("GET", "/v1/subscribers/ada/preferences").get_json()["categories"] == {}
    with_count = ada.call("GET", "/v1/events?type=unsubscribed").get_json()["items"]
    assert with_count == []


def test_a_compressed_unsubscribe_token_minted_before_still_works(ada, client, settings):
    """Tokens are no longer zlib-compressed when minted; links already in mailboxes were."""
    message_id, _ = sent_outbound(ada, to_ada(category="marketing"))
    claims = {"p": ada.id, "m": message_id, "c": "marketing", "s": "ada", "x": 2**40, "pad": "z" * 200}
    earlier = URLSafeSerializer(settings.secret_key, salt=f"tidings.{Purpose.UNSUBSCRIBE}").dumps(claims)
    assert earlier.startswith(".")  # compressed, as itsdangerous minted it
    assert client.post(f"/u/{earlier}", data={"List-Unsubscribe": "One-Click"}).status_code == 200
    preferences = ada.call("GET", "/v1/subscribers/ada/preferences").get_json()
    assert preferences["categories"] == {"marketing": {"email": False}}
