"""The recipient's preference page over HTTP: its link, what it shows, what a save changes,
and what it refuses (forged and expired links, missing or foreign CSRF tokens, a forged
switch of a required category, markup in what a tenant wrote)."""

from __future__ import annotations

import html
import time
from datetime import datetime
from urllib.parse import urlsplit

import pytest
from markupsafe import escape

from app.content import tokens
from app.content.tokens import Purpose
from app.services import preference_page
from tests.api.preference_pages import SETTINGS, audience, link, read_form
from tests.conftest import create_project


def test_the_link_endpoint_answers_a_signed_expiring_url(client, app):
    project = audience(client)
    answer = project.call("POST", "/v1/subscribers/u1/preference-link", {"expires_in": 7 * 86400})
    assert answer.status_code == 200
    body = answer.get_json()
    url = urlsplit(body["url"])
    public = urlsplit(app.extensions["tidings"].settings.public_url)
    assert (url.scheme, url.netloc) == (public.scheme, public.netloc)
    verified = tokens.verify(Purpose.PREFERENCES, url.path.removeprefix("/p/"))
    assert verified is not None
    assert set(verified.claims) == {"p", "s", "c"}
    assert (verified.claims["p"], verified.claims["s"]) == (project.id, "u1")
    assert datetime.fromisoformat(body["expires_at"]).timestamp() == verified.expires_at
    default = project.call("POST", "/v1/subscribers/u1/preference-link").get_json()
    assert datetime.fromisoformat(default["expires_at"]) > datetime.fromisoformat(body["expires_at"])


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {"expires_in": 59},
            {"expires_in": ["Must be greater than or equal to 3600 and less than or equal to 31536000."]},
        ),
        (
            {"expires_in": 10**9},
            {"expires_in": ["Must be greater than or equal to 3600 and less than or equal to 31536000."]},
        ),
        ({"expires_in": "soon"}, {"expires_in": ["Not a valid integer."]}),
        ({"expires": 3600}, {"expires": ["Unknown field."]}),
    ],
)
def test_bad_link_requests_are_422_with_field_errors(client, body, errors):
    project = audience(client)
    answer = project.call("POST", "/v1/subscribers/u1/preference-link", body)
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == errors


def test_a_link_for_an_unknown_subscriber_or_without_a_key_is_refused(client):
    project = audience(client)
    assert project.call("POST", "/v1/subscribers/nobody/preference-link", {}).status_code == 404
    assert client.post("/v1/subscribers/u1/preference-link", json={}).status_code == 401


def test_the_page_shows_categories_by_channel_required_ones_locked_in_the_subscribers_locale(client):
    project = audience(client)
    page = client.get(link(project))
    assert page.status_code == 200
    assert page.mimetype == "text/html"
    form = read_form(page.get_data(as_text=True))
    assert form.checkboxes == {
        "channel.email": True,
        "channel.sms": True,
        "category.security.email": True,
        "category.security.sms": True,
        "category.marketing.email": False,  # the project's default
        "category.marketing.sms": True,
        "category.news.email": True,
        "category.news.sms": True,
    }
    assert form.disabled == {"category.security.email", "category.security.sms"}
    # German for news (de-AT finds de); English where the project gave no German; the key where it gave nothing.
    assert form.legends == [
        ("Channels", None),
        ("Security alerts", "en"),
        ("marketing", None),
        ("Neuigkeiten", "de"),
        ("Quiet hours", None),
    ]
    assert form.fields["timezone"] == "Europe/Vienna"
    assert (form.fields["quiet_start"], form.fields["quiet_end"]) == ("", "")
    assert "22:00 to 07:00" in page.get_data(as_text=True)


def test_the_page_keeps_to_itself_no_cookie_no_script_no_framing_no_referrer(client):
    project = audience(client)
    page = client.get(link(project))
    assert "Set-Cookie" not in page.headers
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "form-action 'self'" in csp
    assert "script-src" not in csp
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert page.headers["Cache-Control"] == "no-store"
    assert "<script" not in page.get_data(as_text=True)
    css = client.get("/p/static/preferences.css")
    assert css.status_code == 200
    assert css.mimetype == "text/css"
    assert "max-width" in css.get_data(as_text=True)


def test_saving_changes_the_preferences_and_the_time_zone_with_an_event(client):
    project = audience(client)
    path = link(project)
    form = read_form(client.get(path).get_data(as_text=True))
    sent = form.submission(
        **{"category.news.email": False, "category.marketing.email": True, "channel.sms": False},
        quiet_start="21:30",
        quiet_end="06:45",
        timezone="America/New_York",
    )
    saved = client.post(path, data=sent)
    assert saved.status_code == 200
    assert "Saved." in saved.get_data(as_text=True)
    assert project.call("GET", "/v1/subscribers/u1/preferences").get_json() == {
        "channels": {"sms": False},
        "categories": {"news": {"email": False}, "marketing": {"email": True}},
        "quiet_hours": {"start": "21:30", "end": "06:45"},
    }
    assert project.call("GET", "/v1/subscribers/u1").get_json()["timezone"] == "America/New_York"
    again = read_form(saved.get_data(as_text=True))
    assert again.checkboxes["category.news.email"] is False
    assert again.checkboxes["channel.sms"] is False
    events = project.call("GET", "/v1/events?type=preferences").get_json()["items"]
    assert [(e["type"], e["data"]["subscriber_id"], e["data"]["source"]) for e in events] == [
        ("preferences", "u1", "preference_page")
    ]
    assert events[0]["data"]["timezone"] == "America/New_York"


def test_an_unchanged_save_stores_no_switch_so_defaults_keep_applying(client):
    project = audience(client)
    path = link(project)
    form = read_form(client.get(path).get_data(as_text=True))
    assert client.post(path, data=form.submission()).status_code == 200
    assert project.call("GET", "/v1/subscribers/u1/preferences").get_json() == {
        "channels": {},
        "categories": {},
        "quiet_hours": None,
    }


def test_the_api_records_its_preference_changes_too(client):
    project = audience(client)
    assert project.call("PUT", "/v1/subscribers/u1/preferences", {"channels": {"sms": False}}).status_code == 200
    events = project.call("GET", "/v1/events?type=preferences").get_json()["items"]
    assert [(e["data"]["source"], e["data"]["preferences"]["channels"]) for e in events] == [("api", {"sms": False})]


def test_a_required_category_cannot_be_turned_off_even_by_a_forged_form(client):
    project = audience(client)
    path = link(project)
    form = read_form(client.get(path).get_data(as_text=True))
    forged = form.submission(**{"channel.email": True})
    forged.pop("category.security.email", None)
    forged["category.security.sms"] = "off"  # whatever is posted for it, it is not read
    assert client.post(path, data=forged).status_code == 200
    stored = project.call("GET", "/v1/subscribers/u1/preferences").get_json()
    assert "security" not in stored["categories"]
    shown = read_form(client.get(path).get_data(as_text=True))
    assert shown.checkboxes["category.security.email"] is True
    assert "category.security.email" in shown.disabled


def test_bad_quiet_hours_are_422_with_the_field_marked_and_nothing_saved(client):
    project = audience(client)
    path = link(project)
    form = read_form(client.get(path).get_data(as_text=True))
    refused = client.post(path, data=form.submission(**{"category.news.email": False}, quiet_start="22:00"))
    assert refused.status_code == 422
    text = refused.get_data(as_text=True)
    assert 'role="alert"' in text and "Give both times" in text
    assert 'id="quiet_end" name="quiet_end" value="" aria-describedby="quiet-hint quiet_end-error"' in text
    same = client.post(path, data=form.submission(quiet_start="08:00", quiet_end="08:00", timezone="Mars/Olympus"))
    assert same.status_code == 422
    assert "start and end must differ." in same.get_data(as_text=True)
    assert "Choose a time zone from the list." in same.get_data(as_text=True)
    assert project.call("GET", "/v1/subscribers/u1/preferences").get_json()["categories"] == {}


def test_a_post_without_its_csrf_token_is_400_and_with_a_wrong_one_403(client):
    project = audience(client)
    path = link(project)
    form = read_form(client.get(path).get_data(as_text=True))
    off = form.submission(**{"category.news.email": False})
    missing = client.post(path, data={k: v for k, v in off.items() if k != "csrf"})
    assert missing.status_code == 400
    assert "<h1>Your choices were not saved</h1>" in missing.get_data(as_text=True)
    assert client.post(path, data={**off, "csrf": off["csrf"][:-2] + "xx"}).status_code == 403
    unsigned = tokens.mint(Purpose.PREFERENCES, {"p": project.id, "t": "0" * 32, "n": "x"})  # another salt
    assert client.post(path, data={**off, "csrf": unsigned}).status_code == 403
    genuine = tokens.verify(Purpose.PREFERENCES_FORM, off["csrf"])
    assert genuine is not None
    stale = tokens.mint_until(Purpose.PREFERENCES_FORM, genuine.claims, int(time.time()) - 1)  # the same, expired
    assert client.post(path, data={**off, "csrf": stale}).status_code == 403
    assert project.call("GET", "/v1/subscribers/u1/preferences").get_json()["categories"] == {}


def test_a_form_from_one_subscribers_page_does_not_save_on_anothers(client):
    project = audience(client)
    assert project.call("PUT", "/v1/subscribers/u2", {"email": "bob@example.com"}).status_code == 201
    ada, bob = link(project, "u1"), link(project, "u2")
    adas_form = read_form(client.get(ada).get_data(as_text=True)).submission(**{"category.news.email": False})
    assert client.post(bob, data=adas_form).status_code == 403
    # Another link to the same subscriber is another link too: its form is its own.
    assert client.post(link(project, "u1", expires_in=3600), data=adas_form).status_code == 403
    for subscriber in ("u1", "u2"):
        assert project.call("GET", f"/v1/subscribers/{subscriber}/preferences").get_json()["categories"] == {}


def test_forged_expired_foreign_and_orphaned_links_are_404(client):
    project = audience(client)
    path = link(project)
    token = path.removeprefix("/p/")
    payload, _, signature = token.rpartition(".")
    claims = tokens.verify(Purpose.PREFERENCES, token).claims
    other = create_project(client)
    assert other.call("PUT", "/v1/subscribers/u2", {}).status_code == 201
    forged = [
        f"{payload}.{signature[:-2]}AA",  # the signature changed
        tokens.mint(Purpose.PREFERENCES, {**claims, "p": other.id, "s": "u2"}).rpartition(".")[0] + f".{signature}",
        tokens.mint(Purpose.UNSUBSCRIBE, {**claims, "m": "x"}),  # another purpose
        tokens.mint(Purpose.SUBSCRIBER, claims),  # the inbox token
        tokens.mint_until(Purpose.PREFERENCES, claims, int(time.time()) - 1),  # expired
        tokens.mint(Purpose.PREFERENCES, {"p": project.id, "c": claims["c"]}),  # names no subscriber
        tokens.mint(Purpose.PREFERENCES, {"p": project.id, "s": "u1"}),  # nor when it was made
        tokens.mint(Purpose.PREFERENCES, {**claims, "c": claims["c"] + 1}),  # made at another time
        "not-a-token",
    ]
    form = read_form(client.get(path).get_data(as_text=True)).submission()
    for bad in forged:
        assert client.get(f"/p/{bad}").status_code == 404, bad
        # With a CSRF token as good as any for that link: the link alone decides.
        csrf = preference_page.csrf_token(project.id, bad)
        assert client.post(f"/p/{bad}", data={**form, "csrf": csrf}).status_code == 404, bad
    assert project.call("DELETE", "/v1/subscribers/u1").status_code == 204
    assert client.get(path).status_code == 404
    assert client.post(path, data=form).status_code == 404
    assert "does not work" in client.get(path).get_data(as_text=True)
    # Someone new under the erased subscriber's id is not reached by the old links; their own work.
    assert project.call("PUT", "/v1/subscribers/u1", {"email": "new@example.com"}).status_code == 201
    assert client.get(path).status_code == 404
    assert client.post(path, data=form).status_code == 404
    assert "For new@example.com" in client.get(link(project)).get_data(as_text=True)


def test_what_tenants_wrote_is_shown_as_text_never_as_markup(client):
    attack = '"><img src=x onerror=alert(1)><script>alert(2)</script>'
    settings = {**SETTINGS, "category_names": {"news": {"en": attack}}}
    project = audience(client, settings, name=attack)
    markup_email = '"<svg/onload=alert(3)>"@example.com'  # a quoted local part may hold anything
    assert project.call("PUT", "/v1/subscribers/u1", {"email": markup_email}).status_code == 200
    page = client.get(link(project)).get_data(as_text=True)
    assert "<img" not in page and "<script" not in page and "<svg" not in page
    assert str(escape(attack)) in page
    assert f"For {escape(markup_email)}" in page


def test_the_unsubscribe_page_of_a_subscribers_message_leads_to_the_preference_page(client):
    project = audience(client)
    to_subscriber = tokens.mint(Purpose.UNSUBSCRIBE, {"p": project.id, "m": "m1", "c": "news", "s": "u1"})
    page = client.get(f"/u/{to_subscriber}").get_data(as_text=True)
    anchor = page.index('<a href="/p/')
    path = html.unescape(page[anchor + len('<a href="') : page.index('"', anchor + len('<a href="'))])
    assert "Choose what you receive instead" in page
    assert client.get(path).status_code == 200
    to_address = tokens.mint(Purpose.UNSUBSCRIBE, {"p": project.id, "m": "m1", "c": "news", "a": "x@example.com"})
    assert "/p/" not in client.get(f"/u/{to_address}").get_data(as_text=True)
