"""Templates over HTTP: versions, locale variants, preview, and what is refused at save."""

from __future__ import annotations

import json
import threading

import pytest
from sqlalchemy import event, text

from app.content.compiling import MAX_SOURCE_BYTES
from app.content.rendering import compiled_cache
from app.db import engine_for
from app.delivery import dispatch
from app.schemas.text import LINE_BREAK
from tests.conftest import create_project
from tests.content.test_rendering import NEVER_COMPILES, REFUSED_BY_PYTHON, TOO_MANY_BLOCKS
from tests.tasks.test_prepare import accepted_raw
from tests.waiting import wait_until

WORDS = {"subject": "Hi {{ name }}", "text": "Welcome, {{ name }}.", "html": "<p>Welcome, {{ name }}.</p>"}
WELCOME = {"key": "welcome", "channel": "email", **WORDS}


def test_create_answers_version_1(project):
    answer = project.call("POST", "/v1/templates", WELCOME)
    assert answer.status_code == 201
    body = answer.get_json()
    assert body["version"] == 1
    assert body["locale"] == body["default_locale"] == "en"
    assert body["locales"] == ["en"]
    assert body["subject"] == "Hi {{ name }}"


def test_a_key_is_created_once(project):
    project.call("POST", "/v1/templates", WELCOME)
    assert project.call("POST", "/v1/templates", WELCOME).status_code == 409


def test_a_change_makes_a_new_version_and_old_ones_stay_readable(project):
    project.call("POST", "/v1/templates", WELCOME)
    changed = project.call("PUT", "/v1/templates/welcome", {**WORDS, "subject": "Hello {{ name }}"})
    assert changed.status_code == 200
    assert changed.get_json()["version"] == 2
    assert project.call("GET", "/v1/templates/welcome").get_json()["subject"] == "Hello {{ name }}"
    old = project.call("GET", "/v1/templates/welcome?version=1").get_json()
    assert (old["version"], old["subject"]) == (1, "Hi {{ name }}")
    assert project.call("GET", "/v1/templates/welcome?version=3").status_code == 404


def test_saving_the_same_words_makes_no_new_version(project):
    project.call("POST", "/v1/templates", WELCOME)
    again = project.call("PUT", "/v1/templates/welcome", {"channel": "email", **WORDS})
    assert again.status_code == 200
    assert again.get_json()["version"] == 1


def test_a_locale_variant_is_added_and_the_others_carried_over(project):
    project.call("POST", "/v1/templates", WELCOME)
    german = {"locale": "de", "subject": "Hallo {{ name }}", "text": "Willkommen, {{ name }}."}
    answer = project.call("PUT", "/v1/templates/welcome", german).get_json()
    assert (answer["version"], answer["locale"], answer["locales"]) == (2, "de", ["de", "en"])
    assert project.call("GET", "/v1/templates/welcome?locale=de-AT").get_json()["subject"] == "Hallo {{ name }}"
    assert project.call("GET", "/v1/templates/welcome?locale=fr").get_json()["subject"] == "Hi {{ name }}"


def test_the_channel_of_a_template_does_not_change(project):
    project.call("POST", "/v1/templates", WELCOME)
    answer = project.call("PUT", "/v1/templates/welcome", {"channel": "sms", "text": "x"})
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"]["channel"] == ["Template 'welcome' is for email."]


def test_put_to_an_unknown_key_is_404(project):
    assert project.call("PUT", "/v1/templates/nope", {"subject": "s", "text": "t"}).status_code == 404


def test_list_shows_the_latest_version_of_each_key_page_by_page(project):
    for key in ("a", "b", "c"):
        project.call("POST", "/v1/templates", {**WELCOME, "key": key})
    project.call("PUT", "/v1/templates/b", {"subject": "B2", "text": "t"})
    first = project.call("GET", "/v1/templates?limit=2").get_json()
    assert [(t["key"], t["version"]) for t in first["items"]] == [("a", 1), ("b", 2)]
    second = project.call("GET", f"/v1/templates?limit=2&cursor={first['next_cursor']}").get_json()
    assert [t["key"] for t in second["items"]] == ["c"]
    assert second["next_cursor"] is None


def test_preview_renders_with_data_and_escapes_html(project):
    project.call("POST", "/v1/templates", WELCOME)
    answer = project.call("POST", "/v1/templates/welcome/preview", {"data": {"name": "<Ada>"}})
    assert answer.status_code == 200
    assert answer.get_json() == {
        "locale": "en",
        "subject": "Hi <Ada>",
        "text": "Welcome, <Ada>.",
        "html": "<p>Welcome, &lt;Ada&gt;.</p>",
    }


def test_preview_of_a_missing_variable_is_422_naming_it(project):
    project.call("POST", "/v1/templates", WELCOME)
    answer = project.call("POST", "/v1/templates/welcome/preview", {"data": {}})
    assert answer.status_code == 422
    body = answer.get_json()
    assert body["message"] == "The template could not be rendered: 'name' is undefined"
    assert body["errors"]["json"]["data"] == ["subject: 'name' is undefined"]


def test_preview_picks_the_locale_with_fallback(project):
    project.call("POST", "/v1/templates", WELCOME)
    project.call("PUT", "/v1/templates/welcome", {"locale": "de", "subject": "Hallo {{ name }}", "text": "t"})
    data = {"name": "Ada"}
    german = project.call("POST", "/v1/templates/welcome/preview", {"data": data, "locale": "de-CH"})
    assert (german.get_json()["locale"], german.get_json()["subject"]) == ("de", "Hallo Ada")
    french = project.call("POST", "/v1/templates/welcome/preview", {"data": data, "locale": "fr"})
    assert (french.get_json()["locale"], french.get_json()["subject"]) == ("en", "Hi Ada")
    old = project.call("POST", "/v1/templates/welcome/preview", {"data": data, "locale": "de", "version": 1})
    assert old.get_json()["locale"] == "en"


@pytest.mark.parametrize(
    ("text_", "encoding", "length", "segments"),
    [
        ("Your code is 1234", "GSM-7", 17, 1),
        ("x" * 160, "GSM-7", 160, 1),
        ("x" * 161, "GSM-7", 161, 2),
        ("€" * 80, "GSM-7", 160, 1),
        ("Grüße 🎉", "UCS-2", 8, 1),
        ("ж" * 71, "UCS-2", 71, 2),
    ],
)
def test_sms_preview_reports_length_and_segments(project, text_, encoding, length, segments):
    project.call("POST", "/v1/templates", {"key": "code", "channel": "sms", "text": "{{ body }}"})
    answer = project.call("POST", "/v1/templates/code/preview", {"data": {"body": text_}}).get_json()
    assert (answer["text"], answer["encoding"], answer["length"], answer["segments"]) == (
        text_,
        encoding,
        length,
        segments,
    )


def test_push_and_webhook_templates_render_their_structured_fields(project):
    push = {"key": "p", "channel": "push", "title": "Hi {{ n }}", "body": "b", "data": {"url": "/u/{{ n }}"}}
    webhook = {"key": "w", "channel": "webhook", "payload": {"user": "{{ n }}", "tags": ["{{ n }}", 3]}}
    assert project.call("POST", "/v1/templates", push).status_code == 201
    assert project.call("POST", "/v1/templates", webhook).status_code == 201
    rendered = project.call("POST", "/v1/templates/p/preview", {"data": {"n": "7"}}).get_json()
    assert (rendered["title"], rendered["data"]) == ("Hi 7", {"url": "/u/7"})
    rendered = project.call("POST", "/v1/templates/w/preview", {"data": {"n": "7"}}).get_json()
    assert rendered["payload"] == {"user": "7", "tags": ["7", 3]}


INJECTIONS = [
    ("{{ ''.__class__.__mro__ }}", "Access to '__mro__' is not allowed."),
    ("{{ x|attr('__globals__') }}", "Access to '__globals__' is not allowed."),
    ("{{ cycler.__init__.__globals__ }}", "Access to '__init__' is not allowed."),
    ("{{ ''['__class__'] }}", "Access to '__class__' is not allowed."),
    ("{% for i in range(10000000) %}x{% endfor %}", "range() is limited to 1000 items."),
    ("{{ '%999999999d' % 1 }}", "%-formatting is not allowed; use filters."),
    ("{{ '{:>999999999}'.format(1) }}", "Access to 'format' is not allowed."),
    ('{{ "%c"|format(n) }}', "Template syntax error on line 1: No filter named 'format'."),
    ("{% include 'other' %}", "include is not supported: a template stands alone."),
    ("{{ ((10**1000)**1000)**30 > 0 }}", "The template makes an integer of more than 4096 bits (a power too large)."),
    ("{{ 'ab' * 10**9 }}", "The template makes a value of more than 262144 characters."),
    ('{{ "\\x00" }}', "The template prints the control character U+0000."),
    (
        "{{ name ",
        "Template syntax error on line 1: unexpected end of template, expected 'end of print statement'.",
    ),
]


@pytest.mark.parametrize(("source", "problem"), INJECTIONS)
def test_injection_attempts_are_refused_at_save_and_nothing_is_written(project, engine, source, problem):
    answer = project.call("POST", "/v1/templates", {**WELCOME, "text": source})
    assert answer.status_code == 422
    assert problem in answer.get_json()["errors"]["json"]["text"]
    with engine.connect() as connection:
        count = connection.execute(
            text("SELECT count(*) FROM templates WHERE project_id = :p"), {"p": project.id}
        ).scalar_one()
    assert count == 0


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "loop iterations"),
        ("{{ 'x' * n }}", "a value of more than 262144 characters"),
        ("{{ 'x'.center(n) }}", "an argument larger than 262144 is not allowed"),
        ("{% for i in range(1000) %}{{ 'y' * 1000 }}{% endfor %}", "output is longer than 262144"),
        ("{{ x|attr(name) }}", "access to attribute '__class__' of 'int' object is unsafe"),
        ("{{ ((n ** 10) ** 1000) ** 30 > 0 }}", "an integer of more than 4096 bits (a power too large)"),
        (
            "{% macro f(k) %}{% if k %}{{ f(k - 1) }}{{ f(k - 1) }}{% endif %}{% endmacro %}{{ f(40) }}",
            "more than 10000 loop iterations and macro calls",
        ),
        ("{{ ('a' * 1000)|replace('a', 'b' * 1000) }}", "a value of more than 262144 characters"),
        ("{{ (0).to_bytes(1, 'big').decode() }}", "the output contains the control character U+0000"),
        (
            "{% set w = 'a ' * 100000 %}{% for i in range(1000) %}{% for j in range(9) %}{{ w|wordcount }}"
            "{% endfor %}{% endfor %}",
            "takes more than 0.25 s to render",
        ),
    ],
)
def test_what_only_shows_at_render_is_a_clear_422_at_preview(project, source, problem):
    assert project.call("POST", "/v1/templates", {**WELCOME, "text": source}).status_code == 201
    data = {"name": "Ada", "n": 10**9, "x": 1}
    if "attr(name)" in source:
        data["name"] = "__class__"
    answer = project.call("POST", "/v1/templates/welcome/preview", {"data": data})
    assert answer.status_code == 422
    (reason,) = answer.get_json()["errors"]["json"]["template"]
    assert reason.startswith("text: not allowed: ")
    assert problem in reason


def test_a_subject_that_breaks_its_line_is_refused_at_save_and_at_preview(project):
    answer = project.call("POST", "/v1/templates", {**WELCOME, "subject": "Hi\n{{ name }}"})
    assert answer.status_code == 422  # the source itself breaks the line: the field's own check
    assert answer.get_json()["errors"]["json"] == {"subject": [LINE_BREAK]}
    answer = project.call("POST", "/v1/templates", {**WELCOME, "subject": 'Hi{{ "\\n" }}{{ name }}'})
    assert answer.status_code == 422  # a printed literal breaks it: the template's check
    assert answer.get_json()["errors"]["json"] == {
        "subject": ["The template prints a line break (U+000A), and a subject is one line."]
    }
    assert project.call("POST", "/v1/templates", WELCOME).status_code == 201
    answer = project.call("POST", "/v1/templates/welcome/preview", {"data": {"name": "Ada\r\nBcc: eve@example.com"}})
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == {
        "template": ["subject: not allowed: the output contains a line break (U+000D), and a subject is one line"]
    }


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {"key": "k", "channel": "email", "text": "t"},
            {"_schema": ["A email template needs subject and text or subject and html."]},
        ),
        (
            {"key": "k", "channel": "sms", "text": "t", "subject": "s"},
            {"subject": ["A sms template has no subject; it has text."]},
        ),
        (
            {"key": "k", "channel": "in_app", "text": "t"},
            {
                "_schema": ["A in_app template needs title or body."],
                "text": ["A in_app template has no text; it has title, body, data."],
            },
        ),
        (
            {"key": "bad key!", "channel": "sms", "text": "t"},
            {"key": ["Use 1 to 128 of A-Z, a-z, 0-9, _ . and -."]},
        ),
        ({"key": "k", "channel": "webhook", "payload": "x"}, {"payload": ["Give a JSON object or array."]}),
        (
            {"key": "k", "channel": "sms", "text": "t", "locale": "english!"},
            {"locale": ["Not a locale like en or pt-BR."]},
        ),
    ],
)
def test_bad_templates_are_422_with_field_errors(project, body, errors):
    answer = project.call("POST", "/v1/templates", body)
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == errors


def test_another_projects_template_is_404(client, project):
    other = create_project(client)
    project.call("POST", "/v1/templates", WELCOME)
    assert other.call("GET", "/v1/templates/welcome").status_code == 404
    assert other.call("PUT", "/v1/templates/welcome", {"subject": "s", "text": "t"}).status_code == 404
    assert other.call("POST", "/v1/templates/welcome/preview", {"data": {}}).status_code == 404
    assert other.call("GET", "/v1/templates").get_json()["items"] == []


def test_sending_with_an_unknown_template_is_422(project):
    body = {"channel": "email", "to": {"email": "a@example.com"}, "template": "nope", "data": {}}
    answer = project.send(body)
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == {"template": ["Unknown template 'nope'."]}


def test_sending_with_a_template_of_another_channel_is_422(project):
    project.call("POST", "/v1/templates", WELCOME)
    answer = project.send({"channel": "sms", "to": {"phone": "+4915112345678"}, "template": "welcome"})
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == {"template": ["Template 'welcome' is for email, not sms."]}


def test_a_message_records_the_version_it_was_sent_with(project):
    project.call("POST", "/v1/templates", WELCOME)
    project.call("PUT", "/v1/templates/welcome", {**WORDS, "subject": "v2"})
    body = {
        "channel": "email",
        "to": {"email": "a@example.com"},
        "template": "welcome",
        "data": {"name": "A"},
    }
    message = project.get(project.send(body).get_json()["id"]).get_json()
    assert (message["template"], message["template_version"]) == ("welcome", 2)


def test_a_send_pins_the_latest_version_remembered_until_a_new_one_is_saved(project, migrated):
    """The pin is remembered between sends (no query), and saving a version makes every
    process forget it, so the very next send pins the new one."""
    project.call("POST", "/v1/templates", WELCOME)
    body = {"channel": "email", "to": {"email": "a@example.com"}, "template": "welcome", "data": {"name": "A"}}
    this_thread, statements = threading.get_ident(), []
    engine = engine_for(migrated.database_url)

    def record(_connection, _cursor, statement, *_):
        if threading.get_ident() == this_thread:
            statements.append(statement)

    versions, template_queries = [], []
    for change in (None, None, {**WORDS, "subject": "v2"}, None):
        if change is not None:
            assert project.call("PUT", "/v1/templates/welcome", change).status_code == 200
        statements.clear()
        event.listen(engine, "before_cursor_execute", record)
        try:
            answer = project.send(body)
        finally:
            event.remove(engine, "before_cursor_execute", record)
        assert answer.status_code == 202
        template_queries.append(sum("FROM templates" in statement for statement in statements))
        versions.append(project.get(answer.get_json()["id"]).get_json()["template_version"])
    assert versions == [1, 1, 2, 2]
    assert template_queries == [1, 0, 1, 0]


def stored_versions(engine, project_id: str) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT count(*) FROM templates WHERE project_id = :p"), {"p": project_id}
        ).scalar_one()


def test_a_template_that_does_not_compile_is_a_422_naming_its_field_and_nothing_is_written(project, engine):
    answer = project.call("POST", "/v1/templates", {**WELCOME, "text": NEVER_COMPILES})
    assert answer.status_code == 422
    assert list(answer.get_json()["errors"]["json"]) == ["text"]
    answer = project.call("POST", "/v1/templates", {**WELCOME, "html": TOO_MANY_BLOCKS})
    assert answer.status_code == 422
    (problem,) = answer.get_json()["errors"]["json"]["html"]
    assert problem.startswith(REFUSED_BY_PYTHON)
    assert stored_versions(engine, project.id) == 0
    assert project.call("POST", "/v1/templates", WELCOME).status_code == 201
    assert project.call("PUT", "/v1/templates/welcome", {**WORDS, "text": TOO_MANY_BLOCKS}).status_code == 422
    assert stored_versions(engine, project.id) == 1


def test_a_source_over_the_size_cap_is_refused_at_save(project, engine):
    answer = project.call("POST", "/v1/templates", {**WELCOME, "html": "x" * (MAX_SOURCE_BYTES + 1)})
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == {"html": [f"The template is longer than {MAX_SOURCE_BYTES} bytes."]}
    assert stored_versions(engine, project.id) == 0


def store_legacy(engine, project_id: str, key: str, text_: str) -> None:
    """A version written before the checks at save, straight into the table: never compiled."""
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO templates (project_id, key, version, channel, default_locale, variants) "
                "VALUES (:p, :k, 1, 'email', 'en', CAST(:v AS jsonb))"
            ),
            {"p": project_id, "k": key, "v": json.dumps({"en": {"subject": "Hi", "text": text_}})},
        )


@pytest.mark.parametrize("source", [NEVER_COMPILES, TOO_MANY_BLOCKS], ids=["issue-30", "nested-blocks"])
def test_a_stored_version_that_does_not_compile_previews_as_a_422_with_its_reason(project, engine, source):
    store_legacy(engine, project.id, "legacy", source)
    for _ in range(2):
        answer = project.call("POST", "/v1/templates/legacy/preview", {"data": {"a": [1]}})
        assert answer.status_code == 422
        (reason,) = answer.get_json()["errors"]["json"]["template"]
        assert reason.startswith("text: the template ")


@pytest.mark.usefixtures("worker")
def test_a_version_that_does_not_compile_fails_each_of_its_messages_with_one_compile(client, project, engine):
    """Prepare gets a RenderError for every message of the version, the first compiled and the
    rest remembered: each message fails alone and at once, no batch is split in halves, and
    another project's messages in the same task are sent."""
    store_legacy(engine, project.id, "legacy", TOO_MANY_BLOCKS)
    ids = accepted_raw(engine, project.id, "legacy", [{"a": [i]} for i in range(6)])
    neighbour = create_project(client)
    assert neighbour.call("POST", "/v1/templates", WELCOME).status_code == 201
    good = accepted_raw(engine, neighbour.id, "welcome", [{"name": f"n{i}"} for i in range(3)])
    (task,) = dispatch.prepare([*ids[:3], *good, *ids[3:]], "bulk")
    task.apply_async()
    failed = [project.wait_for(message_id) for message_id in ids]
    assert {message["status"] for message in failed} == {"failed"}
    (error,) = {message["error"] for message in failed}
    assert error.startswith("render error in text: the template does not compile: SyntaxError: too many")
    assert [neighbour.wait_for(message_id)["status"] for message_id in good] == ["sent"] * 3
    assert (compiled_cache.compiles[project.id], compiled_cache.compiles[neighbour.id]) == (1, 1)


def test_words_are_compiled_before_the_latest_version_is_locked(project, engine):
    """A save compiles for up to half a second: a PUT whose words do not compile answers while
    another transaction holds the template's row, instead of holding a lock and a connection."""
    assert project.call("POST", "/v1/templates", WELCOME).status_code == 201
    answers: list[int] = []
    change = {**WORDS, "text": TOO_MANY_BLOCKS}
    with engine.connect() as locker, locker.begin():
        locker.execute(text("SELECT 1 FROM templates WHERE project_id = :p FOR UPDATE"), {"p": project.id})
        put = threading.Thread(
            target=lambda: answers.append(project.call("PUT", "/v1/templates/welcome", change).status_code), daemon=True
        )
        put.start()
        wait_until(lambda: list(answers), bool, 10, "the PUT to answer while the row is locked")
    put.join(timeout=10)
    assert answers == [422]
