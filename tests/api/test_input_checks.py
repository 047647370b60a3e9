"""Every string that enters the API is checked: bodies, header-like fields, the URL, cursors, stored addresses.

A hostile tenant with a project key must get a 4xx naming what it sent, never a 500 or a
row that later breaks a worker batch; and nothing of a refused request is written.
"""

from __future__ import annotations

import base64
import json

import pytest
import requests
from sqlalchemy import text

from app.schemas.text import LINE_BREAK
from tests.api.test_errors import assert_error_shape
from tests.conftest import ADMIN_KEY, bearer, email

CONTROL_PROBLEM = "Contains control character U+{:04X}; only tab, line feed and carriage return may appear."
NUL = CONTROL_PROBLEM.format(0)


def rows(engine, sql: str, project_id: str) -> int:
    with engine.connect() as connection:
        return connection.execute(text(sql), {"p": project_id}).scalar_one()


MESSAGES = "SELECT count(*) FROM messages WHERE project_id = :p"
SUBSCRIBERS = "SELECT count(*) FROM subscribers WHERE project_id = :p"


@pytest.mark.parametrize(
    ("method", "path", "body", "errors", "written"),
    [
        pytest.param(
            "POST", "/v1/messages", email(subject="Hi\x00"), {"content": {"subject": [NUL]}}, MESSAGES, id="messages"
        ),
        pytest.param(
            "POST",
            "/v1/messages/batch",
            {
                "channel": "email",
                "content": {"subject": "News", "text": "Out."},
                "recipients": [{"email": "a@example.com"}, {"email": "b@example.com", "data": {"name": "B\x00"}}],
            },
            {"recipients": {"1": {"data": {"name": [NUL]}}}},
            "SELECT (SELECT count(*) FROM batches WHERE project_id = :p) + (" + MESSAGES + ")",
            id="batch",
        ),
        pytest.param(
            "PUT", "/v1/subscribers/u1", {"data": {"note": "\x00"}}, {"data": {"note": [NUL]}}, SUBSCRIBERS, id="put"
        ),
        pytest.param(
            "POST",
            "/v1/subscribers/import",
            {"subscribers": [{"external_id": "u1"}, {"external_id": "u2", "locale": "de\x00"}]},
            {"subscribers": {"1": {"locale": [NUL]}}},
            SUBSCRIBERS,
            id="import",
        ),
        pytest.param(
            "POST",
            "/v1/templates",
            {"key": "welcome", "channel": "email", "subject": "Hi", "text": "Welcome\x00"},
            {"text": [NUL]},
            "SELECT count(*) FROM templates WHERE project_id = :p",
            id="templates",
        ),
        pytest.param(
            "POST",
            "/v1/suppressions",
            {"channel": "email", "address": "ada\x00@example.com"},
            {"address": [NUL]},
            "SELECT count(*) FROM suppressions WHERE project_id = :p",
            id="suppressions",
        ),
        pytest.param(
            "POST",
            "/v1/webhooks",
            {"url": "https://hooks.example.com/t", "description": "ops\x00"},
            {"description": [NUL]},
            "SELECT count(*) FROM webhook_endpoints WHERE project_id = :p",
            id="webhooks",
        ),
        pytest.param(
            "PUT",
            "/v1/subscribers/pref/preferences",
            {"quiet_hours": {"start": "22:00\x00", "end": "08:00"}},
            {"quiet_hours": {"start": [NUL]}},
            "SELECT count(*) FROM subscribers WHERE project_id = :p AND preferences <> '{}'::jsonb",
            id="preferences",
        ),
        pytest.param(
            "POST",
            "/v1/admin/projects",
            {"id": "evil-twin", "name": "Evil\x00"},
            {"name": [NUL]},
            "SELECT count(*) FROM projects WHERE id = 'evil-twin'",
            id="admin-projects",
        ),
    ],
)
def test_a_nul_in_any_body_is_422_naming_the_field_and_writes_nothing(
    project, engine, method, path, body, errors, written
):
    project.call("PUT", "/v1/subscribers/pref", {})
    before = rows(engine, written, project.id)
    key = ADMIN_KEY if path.startswith("/v1/admin/") else project.live_key
    answer = project.call(method, path, body, key=key)
    assert assert_error_shape(answer, 422)["errors"] == {"json": errors}
    assert rows(engine, written, project.id) == before


def test_other_control_characters_are_refused_in_keys_too_but_tab_and_line_breaks_are_text(project, engine):
    escape = project.send(email(data={"colour\x1b[31m": "red"}))
    assert assert_error_shape(escape, 422)["errors"] == {
        "json": {"data": {"colour\x1b[31m": [CONTROL_PROBLEM.format(0x1B)]}}
    }
    backspace = project.send({**email(), "content": {"subject": "Hi", "text": "a\bb", "html": "<p>\f</p>"}})
    assert assert_error_shape(backspace, 422)["errors"] == {
        "json": {"content": {"text": [CONTROL_PROBLEM.format(8)], "html": [CONTROL_PROBLEM.format(0x0C)]}}
    }
    assert rows(engine, MESSAGES, project.id) == 0
    text_body = {**email(), "content": {"subject": "Hi\tthere", "text": "line one\r\nline two\n\tindented"}}
    assert project.send(text_body).status_code == 202
    literal = project.send(email(subject="a backslash and u0000: \\u0000"))
    assert literal.status_code == 202


def test_escapes_are_found_however_the_client_writes_them(project, engine):
    raw = '{"channel": "email", "to": {"email": "a@example.com"}, "content": {"subject": "s", "text": "a\\u001Fb"}}'
    answer = project.client.post(
        "/v1/messages", data=raw, content_type="application/json", headers=bearer(project.live_key)
    )
    assert assert_error_shape(answer, 422)["errors"] == {"json": {"content": {"text": [CONTROL_PROBLEM.format(0x1F)]}}}
    assert rows(engine, MESSAGES, project.id) == 0


def test_a_body_nested_deeper_than_the_json_parser_follows_is_400(project, engine):
    deep = "[" * 100_000 + "]" * 100_000
    answer = project.client.post(
        "/v1/messages", data=deep, content_type="application/json", headers=bearer(project.live_key)
    )
    assert assert_error_shape(answer, 400)["errors"] == {"json": ["Invalid JSON body."]}
    assert rows(engine, MESSAGES, project.id) == 0


@pytest.mark.parametrize(
    ("method", "path", "body", "errors"),
    [
        pytest.param(
            "POST",
            "/v1/messages",
            email(subject="a\r\nBcc: x@evil.example"),
            {"content": {"subject": [LINE_BREAK]}},
            id="subject",
        ),
        pytest.param(
            "POST",
            "/v1/messages",
            email(subject="a\u2028Bcc: x@evil.example"),
            {"content": {"subject": [LINE_BREAK]}},
            id="subject-line-separator",
        ),
        pytest.param(
            "POST", "/v1/messages", email(subject="a\nb"), {"content": {"subject": [LINE_BREAK]}}, id="subject-lf"
        ),
        pytest.param(
            "POST",
            "/v1/messages",
            {"channel": "push", "to": {"device_token": "tok\r\nX-Evil: 1"}, "content": {"title": "t"}},
            {"to": {"device_token": [LINE_BREAK]}},
            id="device-token",
        ),
        pytest.param(
            "POST",
            "/v1/messages/batch",
            {
                "channel": "email",
                "content": {"subject": "a\rb", "text": "t"},
                "recipients": [{"email": "a@example.com"}],
            },
            {"content": {"subject": [LINE_BREAK]}},
            id="batch-subject",
        ),
        pytest.param(
            "POST",
            "/v1/templates",
            {"key": "welcome", "channel": "email", "subject": "Hi {{ name }}\r\nBcc: x@evil.example", "text": "t"},
            {"subject": [LINE_BREAK]},
            id="template-subject",
        ),
        pytest.param(
            "PUT",
            "/v1/subscribers/u1",
            {
                "email": "ada@example.com\r\nBcc: x@evil.example",
                "phone": "+4915112345678\r\n1",
                "push_tokens": ["t\n2"],
            },
            {"email": [LINE_BREAK], "phone": [LINE_BREAK], "push_tokens": {"0": [LINE_BREAK]}},
            id="subscriber-addresses",
        ),
        pytest.param(
            "PUT",
            "/v1/subscribers/u1",
            {"data": {"webhook_url": "https://hooks.example.com/\r\nHost: evil.example"}},
            {"data": {"webhook_url": [LINE_BREAK]}},
            id="subscriber-webhook-url",
        ),
    ],
)
def test_a_line_break_in_a_header_like_field_is_422_and_writes_nothing(project, engine, method, path, body, errors):
    answer = project.call(method, path, body)
    assert assert_error_shape(answer, 422)["errors"] == {"json": errors}
    assert rows(engine, MESSAGES, project.id) == 0
    assert rows(engine, SUBSCRIBERS, project.id) == 0


def test_a_batch_row_with_a_line_break_in_its_address_is_rejected_by_index(project):
    body = {
        "channel": "email",
        "content": {"subject": "News", "text": "Out."},
        "recipients": [{"email": "a@example.com"}, {"email": "b@example.com\nBcc: x@evil.example"}],
    }
    answer = project.call("POST", "/v1/messages/batch", body)
    assert answer.status_code == 202
    assert answer.get_json()["rejected"] == [{"index": 1, "errors": {"email": [LINE_BREAK]}}]
    assert answer.get_json()["accepted"] == 1


@pytest.mark.parametrize(
    ("webhook_url", "problem"),
    [(1, "Not a valid URL."), (None, "Field may not be null."), ("ftp://files.example.com/x", "Not a valid URL.")],
)
def test_a_subscriber_webhook_url_must_be_an_http_url_string(project, webhook_url, problem):
    answer = project.call("PUT", "/v1/subscribers/u1", {"data": {"webhook_url": webhook_url, "plan": "pro"}})
    assert assert_error_shape(answer, 422)["errors"] == {"json": {"data": {"webhook_url": [problem]}}}
    assert project.call("GET", "/v1/subscribers/u1").status_code == 404


def test_a_subscriber_with_an_http_webhook_url_is_stored(project):
    data = {"webhook_url": "http://hooks.internal:8080/u1", "plan": "pro"}
    answer = project.call("PUT", "/v1/subscribers/u1", {"data": data})
    assert answer.status_code == 201
    assert project.call("GET", "/v1/subscribers/u1").get_json()["data"] == data


def test_import_rejects_bad_addresses_by_index_and_writes_the_rest(project):
    rows_in = [
        {"external_id": "u1", "data": {"webhook_url": "https://hooks.example.com/u1"}},
        {"external_id": "u2", "data": {"webhook_url": 1}},
        {"external_id": "u3", "push_tokens": [7]},
        {"external_id": "u4", "email": "d@example.com\r\nBcc: x@evil.example"},
        {"external_id": "u5", "email": "e@example.com"},
    ]
    answer = project.call("POST", "/v1/subscribers/import", {"subscribers": rows_in})
    assert answer.status_code == 200
    assert answer.get_json() == {
        "created": 2,
        "updated": 0,
        "rejected": [
            {"index": 1, "errors": {"data": {"webhook_url": ["Not a valid URL."]}}},
            {"index": 2, "errors": {"push_tokens": {"0": ["Not a valid string."]}}},
            {"index": 3, "errors": {"email": [LINE_BREAK]}},
        ],
    }
    assert [s["external_id"] for s in project.call("GET", "/v1/subscribers").get_json()["items"]] == ["u1", "u5"]


@pytest.mark.parametrize("route", ["/v1/events", "/v1/messages"])
@pytest.mark.parametrize(
    ("query", "problem"),
    [("%00", "Contains a NUL character."), ("a%ffb", "Not valid UTF-8."), ("%C0%AF", "Not valid UTF-8.")],
)
def test_a_query_parameter_with_a_nul_or_bad_utf8_is_400(project, route, query, problem):
    answer = project.client.get(f"{route}?limit=5&subscriber_id={query}", headers=bearer(project.live_key))
    assert assert_error_shape(answer, 400)["errors"] == {"query": {"subscriber_id": [problem]}}


@pytest.mark.parametrize(
    ("method", "path", "parameter", "problem"),
    [
        ("GET", "/v1/subscribers/a%00b", "external_id", "Contains a NUL character."),
        ("PUT", "/v1/subscribers/a%ffb/preferences", "external_id", "Not valid UTF-8."),
        ("GET", "/v1/messages/%ff", "message_id", "Not valid UTF-8."),
        ("DELETE", "/v1/suppressions/email/a%00%2Fb@example.com", "address", "Contains a NUL character."),
        ("GET", "/v1/nowhere%00", "path", "Contains a NUL character."),
    ],
)
def test_a_path_segment_with_a_nul_or_bad_utf8_is_400(project, method, path, parameter, problem):
    answer = project.call(method, path, {} if method == "PUT" else None)
    assert assert_error_shape(answer, 400)["errors"] == {"path": {parameter: [problem]}}


def test_the_url_is_read_as_sent_over_real_http_too(project, live_api):
    headers = bearer(project.live_key)
    answer = requests.get(f"{live_api}/v1/subscribers/a%ffb", headers=headers, timeout=10)
    assert (answer.status_code, answer.json()["errors"]) == (400, {"path": {"external_id": ["Not valid UTF-8."]}})
    answer = requests.get(f"{live_api}/v1/events?subscriber_id=%00", headers=headers, timeout=10)
    assert (answer.status_code, answer.json()["errors"]) == (
        400,
        {"query": {"subscriber_id": ["Contains a NUL character."]}},
    )
    assert requests.get(f"{live_api}/v1/subscribers/caf%C3%A9", headers=headers, timeout=10).status_code == 404


def cursor_of(document: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    ("route", "cursor"),
    [
        ("/v1/events", "garbage"),
        ("/v1/events", cursor_of(["not a time", "evt_1"])),
        ("/v1/events", cursor_of(["2030-01-01T00:00:00", "evt_1"])),
        ("/v1/messages", cursor_of(["2030-01-01T00:00:00+00:00", "not-a-uuid"])),
        ("/v1/messages", "é"),
        ("/v1/subscribers", cursor_of(["u\x00"])),
        ("/v1/subscribers", cursor_of([1])),
        ("/v1/subscribers", base64.urlsafe_b64encode(b"[" * 100_000).decode()),
        ("/v1/suppressions", cursor_of(["fax", "a@example.com"])),
        ("/v1/templates", cursor_of(["a", "b"])),
        ("/v1/webhooks", cursor_of(["2030-01-01T00:00:00+00:00", "x"])),
        ("/v1/subscribers/u1/inbox", cursor_of(["unread", "yesterday", "x"])),
    ],
)
def test_a_cursor_this_list_did_not_give_out_is_400_naming_it(project, route, cursor):
    project.call("PUT", "/v1/subscribers/u1", {})
    answer = project.client.get(route, query_string={"cursor": cursor}, headers=bearer(project.live_key))
    assert assert_error_shape(answer, 400)["errors"] == {"query": {"cursor": ["Not a cursor this list gave out."]}}


def test_a_time_with_an_offset_postgresql_refuses_is_read_in_utc(project):
    """Python takes offsets up to ±23:59, PostgreSQL none past ±15:59: the time is compared in UTC."""
    sent = project.send(email())
    assert sent.status_code == 202
    answer = project.call("GET", "/v1/messages?since=2026-01-01T08:06:31%2B20:01")
    assert answer.status_code == 200, answer.get_json()
    assert sent.get_json()["id"] in [m["id"] for m in answer.get_json()["items"]]
    assert project.call("GET", "/v1/events?until=4416-05-27T11:33:07%2B23:04").status_code == 200


def test_a_time_that_leaves_the_calendar_in_utc_is_422(project):
    answer = project.call("GET", "/v1/messages?since=0001-01-01T00:00:00%2B20:00")
    assert answer.status_code == 422
    assert answer.get_json()["errors"] == {
        "query": {"since": ["Out of range: the time must fall within the years 1 to 9999 in UTC."]}
    }


def test_a_locale_longer_than_35_characters_is_422(project, engine):
    locale = "en-" + "-".join(["abcdefgh"] * 4)  # 38 characters, shaped like a locale
    answer = project.call("PUT", "/v1/subscribers/long-locale", {"email": "a@example.com", "locale": locale})
    assert answer.status_code == 422
    assert answer.get_json()["errors"] == {"json": {"locale": ["Longer than maximum length 35."]}}
    assert rows(engine, SUBSCRIBERS, project.id) == 0
