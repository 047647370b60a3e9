"""Console sign-in, sessions, CSRF and security headers, through the Flask test client."""

from __future__ import annotations

import time

from app.console.blueprint import CSP
from tests.conftest import ADMIN_KEY, bearer, create_project
from tests.console.conftest import csrf_of, sign_in, token


def test_sign_in_with_a_project_key_shows_that_project(client, project):
    answer = sign_in(client, project.live_key)
    assert answer.status_code == 302 and answer.headers["Location"].endswith("/console/messages")
    page = client.get("/console/messages")
    assert page.status_code == 200
    assert f"project {project.id}" in page.get_data(as_text=True)


def test_the_session_cookie_is_httponly_strict_scoped_and_expires(client, project):
    answer = sign_in(client, project.live_key)
    cookie = answer.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/console" in cookie
    assert "Expires=" in cookie
    assert project.live_key not in cookie


def test_a_wrong_key_is_refused_and_pages_send_to_sign_in(client, project):
    assert sign_in(client, "tid_live_not-a-key").status_code == 401
    page = client.get("/console/messages")
    assert page.status_code == 302 and "/console/login" in page.headers["Location"]


def test_a_revoked_key_ends_its_session(client, project):
    sign_in(client, project.live_key)
    assert client.get("/console/messages").status_code == 200
    revoked = client.delete(f"/v1/admin/projects/{project.id}/keys/{project.live_key_id}", headers=bearer(ADMIN_KEY))
    assert revoked.status_code == 204
    assert client.get("/console/messages").status_code == 302


def test_a_session_past_its_lifetime_is_signed_out(client, project, app):
    sign_in(client, project.live_key)
    hours = app.extensions["tidings"].settings.console_session_hours
    with client.session_transaction() as session:
        session["signed_in_at"] = int(time.time()) - hours * 3600 - 1
    page = client.get("/console/messages")
    assert page.status_code == 302 and "/console/login" in page.headers["Location"]


def test_sign_out_ends_the_session(client, project):
    sign_in(client, project.live_key)
    out = client.post("/console/logout", data={"csrf_token": token(client)})
    assert out.status_code == 302
    assert client.get("/console/messages").status_code == 302


def test_a_post_without_the_csrf_token_is_400_and_with_a_wrong_one_403(client, project):
    sign_in(client, project.live_key)
    form = {"channel": "email", "address": "nobody@example.com"}
    assert client.post("/console/suppressions", data=form).status_code == 400
    assert client.post("/console/suppressions", data={**form, "csrf_token": "forged"}).status_code == 403
    assert client.post("/console/logout").status_code == 400
    listed = project.call("GET", "/v1/suppressions").get_json()
    assert listed["items"] == []


def test_the_sign_in_form_needs_its_token_too(client, project):
    assert client.post("/console/login", data={"key": project.live_key}).status_code == 400
    client.get("/console/login")
    assert client.post("/console/login", data={"key": project.live_key, "csrf_token": "x"}).status_code == 403


def test_the_token_changes_at_sign_in(client, project):
    before = csrf_of(client.get("/console/login"))
    sign_in(client, project.live_key)
    assert token(client) != before


def test_every_console_response_has_the_security_headers(client, project):
    responses = [client.get("/console/login"), client.get("/console/static/console.css")]
    sign_in(client, project.live_key)
    responses += [client.get("/console/messages"), client.get("/console/messages/not-an-id")]
    for response in responses:
        assert response.headers["Content-Security-Policy"] == CSP
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert "'unsafe-inline'" not in CSP and "frame-ancestors 'none'" in CSP


def test_no_page_has_inline_script_or_style(client, project):
    sign_in(client, project.live_key)
    pages = ("/console/messages", "/console/templates", "/console/suppressions", "/console/subscribers")
    for path in (*pages, "/console/batches", "/console/webhooks", "/console/login"):
        text = client.get(path).get_data(as_text=True)
        assert "<style" not in text and " style=" not in text, path
        assert "<script>" not in text and "<script " not in text.replace('<script src="/console/static/', ""), path


def test_a_project_key_gets_no_operations(client, project):
    sign_in(client, project.live_key)
    assert client.get("/console/operations").status_code == 403
    assert client.get("/console/projects").status_code == 403


def test_the_admin_picks_a_project_and_sees_operations(client, project):
    answer = sign_in(client, ADMIN_KEY)
    assert answer.headers["Location"].endswith("/console/operations")
    assert client.get("/console/operations").status_code == 200
    assert client.get("/console/messages").headers["Location"].endswith("/console/projects")
    other = create_project(client)
    picked = client.post("/console/projects", data={"project": other.id, "csrf_token": token_of_admin(client)})
    assert picked.status_code == 302
    assert f"project {other.id}" in client.get("/console/messages").get_data(as_text=True)


def token_of_admin(client) -> str:
    return csrf_of(client.get("/console/operations"))


def test_after_sign_in_it_goes_only_to_console_paths(client, project):
    form_token = csrf_of(client.get("/console/login"))
    answer = client.post(
        "/console/login", data={"key": project.live_key, "csrf_token": form_token, "next": "//evil.example/console/"}
    )
    assert answer.headers["Location"].endswith("/console/messages")


def test_the_cookie_is_secure_when_configured(client, project, app, monkeypatch):
    monkeypatch.setitem(app.config, "SESSION_COOKIE_SECURE", True)
    assert "Secure" in sign_in(client, project.live_key).headers["Set-Cookie"]


def test_an_admin_session_of_another_admin_key_is_signed_out(client):
    sign_in(client, ADMIN_KEY)
    assert client.get("/console/operations").status_code == 200
    with client.session_transaction() as session:
        session["admin"] = "a fingerprint of some earlier admin key"
    assert client.get("/console/operations").status_code == 302
