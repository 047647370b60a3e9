"""The console's operations, templates and suppressions pages through the Flask test client:
each action lands where the API would put it, and another project's data stays out of sight."""

from __future__ import annotations

from app.delivery.breaker import CircuitBreakers
from app.delivery.pauses import ProviderPauses
from app.services.templates import checked_words
from tests.conftest import ADMIN_KEY, create_project
from tests.console.conftest import csrf_of, sign_in, token
from tests.content.test_rendering import NEVER_COMPILES, REFUSED_BY_PYTHON, TOO_MANY_BLOCKS

SCRIPT = "<script>alert(1)</script>"


def test_operations_lists_providers_and_pauses_and_resumes_one(client, app):
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/operations").get_data(as_text=True)
    assert 'id="provider-fake"' in page and 'id="lanes"' in page and "Flower" in page
    form = csrf_of(client.get("/console/operations"))
    redis = app.extensions["tidings"].redis
    try:
        paused = client.post(
            "/console/operations/providers/fake/pause",
            data={"csrf_token": form, "reason": "maintenance", "seconds": ""},
        )
        assert paused.status_code == 302
        assert [p.reason for p in ProviderPauses(redis).all() if p.provider == "fake"] == ["maintenance"]
        assert "paused: maintenance" in client.get("/console/operations").get_data(as_text=True)
    finally:
        resumed = client.post("/console/operations/providers/fake/resume", data={"csrf_token": form})
    assert resumed.status_code == 302
    assert [p for p in ProviderPauses(redis).all() if p.provider == "fake"] == []
    assert client.post("/console/operations/providers/nope/pause", data={"csrf_token": form}).status_code == 404


def test_a_pause_form_with_bad_seconds_pauses_nothing(client, app):
    sign_in(client, ADMIN_KEY)
    form = csrf_of(client.get("/console/operations"))
    client.post("/console/operations/providers/fake/pause", data={"csrf_token": form, "seconds": "0"})
    assert [p for p in ProviderPauses(app.extensions["tidings"].redis).all() if p.provider == "fake"] == []
    assert "Not paused" in client.get("/console/operations").get_data(as_text=True)


def test_suppressions_are_added_listed_and_removed(client, project):
    sign_in(client, project.live_key)
    added = client.post(
        "/console/suppressions", data={"csrf_token": token(client), "channel": "email", "address": "Gone@Example.com"}
    )
    assert added.status_code == 302
    assert [s["address"] for s in project.call("GET", "/v1/suppressions").get_json()["items"]] == ["gone@example.com"]
    assert "gone@example.com" in client.get("/console/suppressions").get_data(as_text=True)
    removed = client.post(
        "/console/suppressions/remove",
        data={"csrf_token": token(client), "channel": "email", "address": "gone@example.com"},
    )
    assert removed.status_code == 302
    assert project.call("GET", "/v1/suppressions").get_json()["items"] == []
    bad = client.post("/console/suppressions", data={"csrf_token": token(client), "channel": "email", "address": "x"})
    assert bad.status_code == 422 and "address" in bad.get_data(as_text=True)
    assert project.call("GET", "/v1/suppressions").get_json()["items"] == []


def test_another_projects_suppressions_stay_out_of_sight(client, project):
    other = create_project(client)
    other.call("POST", "/v1/suppressions", {"channel": "email", "address": "theirs@example.com"})
    sign_in(client, project.live_key)
    assert "theirs@example.com" not in client.get("/console/suppressions").get_data(as_text=True)
    gone = client.post(
        "/console/suppressions/remove",
        data={"csrf_token": token(client), "channel": "email", "address": "theirs@example.com"},
    )
    assert gone.status_code == 404
    assert len(other.call("GET", "/v1/suppressions").get_json()["items"]) == 1


def make_template(project, key: str = "welcome", **fields):
    body = {"key": key, "channel": "email", "subject": "Hello {{ name }}", "text": "Hi {{ name }}", **fields}
    made = project.call("POST", "/v1/templates", body)
    assert made.status_code == 201, made.get_json()


def test_the_editor_previews_unsaved_words_and_saving_makes_a_version(client, project):
    make_template(project)
    sign_in(client, project.live_key)
    page = client.get("/console/templates/welcome")
    assert page.status_code == 200 and "Save as version 2" in page.get_data(as_text=True)
    form = csrf_of(page)
    preview = client.post(
        "/console/templates/welcome/preview",
        json={"fields": {"subject": "Bye {{ name }}", "text": "So long"}, "data": {"name": "Ada"}},
        headers={"X-CSRF-Token": form},
    )
    assert preview.status_code == 200, preview.get_json()
    assert preview.get_json()["subject"] == "Bye Ada"
    assert project.call("GET", "/v1/templates/welcome").get_json()["version"] == 1
    missing = client.post(
        "/console/templates/welcome/preview",
        json={"fields": {"subject": "Bye {{ name }}", "text": "x"}, "data": {}},
        headers={"X-CSRF-Token": form},
    )
    assert missing.status_code == 422 and "name" in str(missing.get_json()["errors"])
    unsafe = client.post(
        "/console/templates/welcome/preview",
        json={"fields": {"subject": "{{ ''.__class__ }}", "text": "x"}, "data": {}},
        headers={"X-CSRF-Token": form},
    )
    assert unsafe.status_code == 422
    no_token = client.post("/console/templates/welcome/preview", json={"fields": {}, "data": {}})
    assert no_token.status_code == 400
    saved = client.post(
        "/console/templates/welcome", data={"csrf_token": form, "subject": "Bye {{ name }}", "text": "So long"}
    )
    assert saved.status_code == 302
    latest = project.call("GET", "/v1/templates/welcome").get_json()
    assert (latest["version"], latest["subject"]) == (2, "Bye {{ name }}")


def test_an_sms_preview_counts_length_and_segments(client, project):
    made = project.call("POST", "/v1/templates", {"key": "code", "channel": "sms", "text": "Code {{ code }}"})
    assert made.status_code == 201, made.get_json()
    sign_in(client, project.live_key)
    form = token(client)
    answer = client.post(
        "/console/templates/code/preview",
        json={"fields": {"text": "x" * 170 + "{{ code }}"}, "data": {"code": "1234"}},
        headers={"X-CSRF-Token": form},
    ).get_json()
    assert (answer["length"], answer["segments"], answer["encoding"]) == (174, 2, "GSM-7")


def test_templates_are_created_from_the_console(client, project):
    sign_in(client, project.live_key)
    created = client.post(
        "/console/templates",
        data={"csrf_token": token(client), "key": "receipt", "channel": "email", "subject": "Paid", "text": "Thanks"},
    )
    assert created.status_code == 302 and created.headers["Location"].endswith("/console/templates/receipt")
    assert project.call("GET", "/v1/templates/receipt").get_json()["version"] == 1


def test_template_text_is_escaped_and_other_projects_templates_are_404(client, project):
    make_template(project, key="xss", subject=SCRIPT, html=f"<p>{SCRIPT}</p>")
    other = create_project(client)
    make_template(other, key="theirs")
    sign_in(client, project.live_key)
    page = client.get("/console/templates/xss").get_data(as_text=True)
    assert SCRIPT not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "theirs" not in client.get("/console/templates").get_data(as_text=True)
    assert client.get("/console/templates/theirs").status_code == 404
    form = token(client)
    assert (
        client.post(
            "/console/templates/theirs/preview", json={"fields": {}, "data": {}}, headers={"X-CSRF-Token": form}
        ).status_code
        == 404
    )
    assert client.post("/console/templates/theirs", data={"csrf_token": form, "text": "mine now"}).status_code == 404
    assert other.call("GET", "/v1/templates/theirs").get_json()["version"] == 1


def test_operations_shows_a_providers_recent_error_rate(client, app):
    context = app.extensions["tidings"]
    CircuitBreakers(context.redis, context.settings.breaker).record("fake2", ok=3, failed=1, probe=False)
    sign_in(client, ADMIN_KEY)
    page = client.get("/console/operations").get_data(as_text=True)
    row = page.split('id="provider-fake2"')[1].split("</tr>")[0]
    assert '<td class="error-rate">25.0% of 4</td>' in row


def test_the_editor_adds_a_locale_variant_as_a_new_version(client, project):
    make_template(project)
    sign_in(client, project.live_key)
    form = token(client)
    saved = client.post(
        "/console/templates/welcome",
        data={"csrf_token": form, "locale": "de", "subject": "Hallo {{ name }}", "text": "Hallo"},
    )
    assert saved.status_code == 302 and "locale=de" in saved.headers["Location"]
    german = project.call("GET", "/v1/templates/welcome?locale=de").get_json()
    assert (german["version"], german["locale"], german["subject"], german["locales"]) == (
        2,
        "de",
        "Hallo {{ name }}",
        ["de", "en"],
    )
    assert project.call("GET", "/v1/templates/welcome?locale=en").get_json()["subject"] == "Hello {{ name }}"
    page = client.get("/console/templates/welcome?locale=de").get_data(as_text=True)
    assert 'value="Hallo {{ name }}"' in page and "version 2 of 2" in page


def preview(client, form: str, fields: dict, data: dict | None = None):
    return client.post(
        "/console/templates/welcome/preview",
        json={"fields": fields, "data": data or {}},
        headers={"X-CSRF-Token": form},
    )


def test_a_template_that_does_not_compile_is_a_422_naming_its_field_from_the_console(client, project):
    make_template(project)
    sign_in(client, project.live_key)
    form = token(client)
    words = {"subject": "s", "text": TOO_MANY_BLOCKS}
    saved = client.post("/console/templates/welcome", data={"csrf_token": form, **words})
    assert saved.status_code == 422
    page = saved.get_data(as_text=True)
    assert "text" in page and REFUSED_BY_PYTHON in page
    created = client.post(
        "/console/templates",
        data={"csrf_token": form, "key": "bad", "channel": "email", "subject": "s", "text": NEVER_COMPILES},
    )
    assert created.status_code == 422 and "text" in created.get_data(as_text=True)
    previewed = preview(client, form, words)
    assert previewed.status_code == 422
    (problem,) = previewed.get_json()["errors"]["json"]["text"]
    assert problem.startswith(REFUSED_BY_PYTHON)
    assert project.call("GET", "/v1/templates/welcome").get_json()["version"] == 1
    assert project.call("GET", "/v1/templates/bad").status_code == 404


def test_draft_previews_are_compiled_once_per_words_failures_included(client, project):
    make_template(project)
    sign_in(client, project.live_key)
    form = token(client)
    compiles = checked_words.compiles[project.id]
    draft = {"subject": "Bye {{ name }}", "text": "So long"}
    answers = [preview(client, form, draft, {"name": name}).get_json()["subject"] for name in ("Ada", "Bo")]
    assert answers == ["Bye Ada", "Bye Bo"]
    assert checked_words.compiles[project.id] == compiles + 1
    assert preview(client, form, {**draft, "text": "other words"}).status_code == 422  # `name` is missing
    assert checked_words.compiles[project.id] == compiles + 2
    broken = {"subject": "s", "text": TOO_MANY_BLOCKS}
    assert [preview(client, form, broken).status_code for _ in range(2)] == [422, 422]
    assert checked_words.compiles[project.id] == compiles + 3
    saved = client.post("/console/templates/welcome", data={"csrf_token": form, **draft})
    assert saved.status_code == 302  # what was just previewed was checked already
    assert checked_words.compiles[project.id] == compiles + 3


def test_console_pages_count_against_the_projects_rate_limit_like_the_api(client):
    limited = create_project(client, rate_limit_per_min=5)
    make_template(limited)  # 1
    sign_in(client, limited.live_key)
    form = token(client)  # 2: a console page
    assert limited.call("POST", "/v1/templates/welcome/preview", {"data": {"name": "A"}}).status_code == 200  # 3
    answers = [preview(client, form, {"subject": "Hi", "text": "t"}) for _ in range(3)]  # 4, 5, 6
    assert [answer.status_code for answer in answers] == [200, 200, 429]
    refused = answers[-1]
    assert refused.get_json()["message"] == "Rate limit exceeded; retry after the window resets."
    assert (refused.headers["RateLimit-Limit"], refused.headers["RateLimit-Remaining"]) == ("5", "0")
    assert client.get("/console/templates").status_code == 429
    assert limited.call("GET", "/v1/templates").status_code == 429
    other = create_project(client, rate_limit_per_min=5)
    assert other.call("GET", "/v1/templates").status_code == 200
