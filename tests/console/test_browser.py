"""The console in a real browser: Debian's headless Chromium, driven by Playwright, against the
API served over HTTP on 127.0.0.1 and a real Celery worker delivering to the local fake provider.

Every request the browser makes to anywhere but 127.0.0.1 is aborted and recorded: the pages
must work, and the record stay empty, with nothing fetched from a CDN. A screenshot of each
page goes to a folder the test run prints, for a person to look at.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from playwright.sync_api import expect

from app.delivery import fairness
from app.delivery.queues import deliver_queue
from tests.browser import chromium, loopback_only, needs_chromium
from tests.conftest import ADMIN_KEY, bearer, create_project, email
from tests.console.test_audience import later
from tests.waiting import wait_until

pytestmark = needs_chromium
TIMEOUT_MS = 15_000


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("console-screenshots")
    print(f"\nconsole screenshots: {folder}")
    return folder


class Visit:
    """One browser context (its own cookies) on the console, with everything it saw recorded."""

    def __init__(self, browser, base: str, screenshots: Path) -> None:
        # Tall enough for a whole page: Chromium leaves a sandboxed frame below the viewport
        # blank in a full-page screenshot (it paints frames of another process lazily).
        self.context = browser.new_context(viewport={"width": 1280, "height": 1800})
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.base, self.screenshots = base, screenshots
        self.off_loopback: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.csp_violations: list[tuple[str, str]] = []
        loopback_only(self.page, self.off_loopback)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("dialog", self._dialog)
        self.page.on("console", self._console)

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _console(self, message) -> None:
        """What the CSP refused, and on which document: the console's own pages have no inline
        code, so only a message's rendered content (tenant HTML) may see refusals."""
        if "Content Security Policy" in message.text:
            self.csp_violations.append((message.location.get("url", ""), message.text))

    def refused_outside_content(self) -> list[tuple[str, str]]:
        return [(url, text) for url, text in self.csp_violations if not url.endswith("/content")]

    def go(self, path: str) -> None:
        answer = self.page.goto(self.base + path)
        assert answer is not None

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.screenshots / f"{name}.png"), full_page=True)

    def sign_in(self, key: str) -> None:
        self.go("/console/login")
        self.shot("00-sign-in")
        self.page.fill("#key", key)
        self.page.click("button[type=submit]")
        self.page.wait_for_load_state()

    def close(self) -> None:
        self.context.close()
        assert self.off_loopback == [], "the console reached beyond 127.0.0.1"
        assert self.errors == [] and self.dialogs == [] and self.refused_outside_content() == []


@pytest.fixture
def visit(browser, live_api, screenshots, worker) -> Iterator:
    opened: list[Visit] = []

    def open_visit() -> Visit:
        opened.append(Visit(browser, live_api, screenshots))
        return opened[-1]

    yield open_visit
    for one in opened:
        one.close()


def api_send(live_api: str, key: str, body: dict) -> str:
    answer = requests.post(f"{live_api}/v1/messages", json=body, headers=bearer(key), timeout=10)
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def reload_until(visit: Visit, path: str, selector: str, wanted: str, what: str) -> None:
    """Reload a page until `selector`'s text is `wanted` (the console's pages are server-rendered)."""

    def seen() -> str:
        visit.go(path)
        return visit.page.inner_text(selector)

    wait_until(seen, lambda text: text.strip() == wanted, 20, what, every=0.2)


def test_a_project_key_signs_in_finds_a_sent_message_and_reads_its_timeline(client, visit, live_api):
    project = create_project(client)
    other = create_project(client)
    theirs = other.send(email("Theirs", scheduled_at=(datetime.now(UTC) + timedelta(hours=1)).isoformat()))
    ours = visit()
    ours.sign_in(project.live_key)
    assert ours.page.url.endswith("/console/messages")
    ours.shot("01-messages-empty")

    message_id = api_send(live_api, project.live_key, email("Browser check", to="ada@example.com"))
    project.wait_for(message_id, {"sent"})
    ours.go("/console/messages?to=ada@example.com")
    ours.shot("02-messages-filtered")
    ours.page.click(f'a[href="/console/messages/{message_id}"]')
    ours.page.wait_for_selector("#timeline")
    assert ours.page.inner_text("#status") == "sent"
    steps = ours.page.locator("#timeline .event").all_inner_texts()
    assert steps[0] == "accepted" and "sent" in steps
    ours.shot("03-message-timeline")

    ours.go(f"/console/messages/{theirs.get_json()['id']}")
    assert "404" in ours.page.inner_text("h1")
    ours.go("/console/messages")
    assert "Theirs" not in ours.page.content() and theirs.get_json()["id"] not in ours.page.content()


def test_tenant_html_and_text_stay_inert_in_the_browser(client, visit, live_api):
    project = create_project(client)
    script = "<script>alert('subject')</script>"
    body = {
        "channel": "email",
        "to": {"email": "ada@example.com"},
        "content": {
            "subject": script,
            "text": "<img src=x onerror=alert('text')>",
            "html": "<p id=inside>Hello</p><script>alert('html')</script><img src=x onerror=alert('img')>",
        },
    }
    message_id = api_send(live_api, project.live_key, body)
    project.wait_for(message_id, {"sent"})
    ours = visit()
    ours.sign_in(project.live_key)
    ours.go(f"/console/messages/{message_id}")
    assert ours.page.inner_text("#subject") == script
    frame = ours.page.frame_locator("iframe.rendered")
    assert frame.locator("#inside").inner_text() == "Hello"
    ours.shot("04-message-hostile-content")
    refused = [text for url, text in ours.csp_violations if url.endswith(f"/{message_id}/content")]
    assert any("img-src" in text for text in refused), ours.csp_violations  # its image was not fetched
    # Visit.close asserts that no dialog opened and no script error was seen


def test_the_editor_previews_as_one_types_and_saves_a_version(client, visit):
    project = create_project(client)
    made = project.call("POST", "/v1/templates", {"key": "welcome", "channel": "email", "subject": "Hi", "text": "Yo"})
    assert made.status_code == 201
    ours = visit()
    ours.sign_in(project.live_key)
    ours.go("/console/templates")
    ours.shot("05-templates")
    ours.page.click('a[href="/console/templates/welcome"]')
    expect(ours.page.locator("#preview-subject")).to_have_text("Hi")
    ours.page.fill("#sample", '{"name": "Ada"}')
    ours.page.fill("#field-subject", "Welcome, {{ name }}")
    expect(ours.page.locator("#preview-subject")).to_have_text("Welcome, Ada")
    ours.page.fill("#field-html", "<p>Dear {{ name }}</p>")
    expect(ours.page.frame_locator("#preview-html").locator("p")).to_have_text("Dear Ada")
    ours.shot("06-template-editor")
    ours.page.click("#editor button[type=submit]")
    ours.page.wait_for_selector(".flash")
    assert "Saved as version 2" in ours.page.inner_text(".flash")
    assert project.call("GET", "/v1/templates/welcome").get_json()["subject"] == "Welcome, {{ name }}"


def test_a_suppression_is_added_and_removed(client, visit):
    project = create_project(client)
    ours = visit()
    ours.sign_in(project.live_key)
    ours.go("/console/suppressions")
    ours.page.fill("#s-address", "gone@example.com")
    ours.page.get_by_role("button", name="Suppress", exact=True).click()
    ours.page.wait_for_selector(".flash")
    assert ours.page.locator("#suppressions .address").all_inner_texts() == ["gone@example.com"]
    ours.shot("07-suppressions")
    ours.page.click('button[aria-label="Remove gone@example.com"]')
    ours.page.wait_for_selector(".flash")
    assert ours.page.locator("#suppressions .address").all_inner_texts() == []
    assert project.call("GET", "/v1/suppressions").get_json()["items"] == []


def test_the_admin_pauses_a_provider_a_message_waits_and_goes_on_resume(client, visit, live_api, app, fake_provider):
    project = create_project(client)
    admin = visit()
    admin.sign_in(ADMIN_KEY)
    assert admin.page.url.endswith("/console/operations")
    admin.go("/console/projects")
    assert project.id in admin.page.content()
    admin.shot("10-projects")
    admin.go("/console/operations")
    try:
        row = admin.page.locator("#provider-fake")
        row.locator("input[name=reason]").fill("browser test")
        row.get_by_role("button", name="Pause", exact=True).click()
        admin.page.wait_for_selector(".flash")
        assert "paused: browser test" in admin.page.inner_text("#provider-fake .paused")
        admin.shot("08-operations-paused")

        message_id = api_send(live_api, project.live_key, email("Waits", to="wait@example.com"))
        waiting = fairness.lists(deliver_queue("fake", "transactional")) + project.id  # its project's turn
        redis = app.extensions["tidings"].redis
        wait_until(
            lambda: [i for chunk in redis.lrange(waiting, 0, -1) for i in json.loads(chunk)],
            lambda parked: message_id in parked,
            20,
            "the message to wait in the paused provider's lane",
        )
        assert fake_provider.count(message_id) == 0
        admin.go("/console/projects")
        admin.page.locator("tr", has_text=project.id).get_by_role("button", name="Show").click()
        admin.go(f"/console/messages/{message_id}")
        assert admin.page.inner_text("#status") == "ready"
        admin.shot("09-message-waiting")
        admin.go("/console/operations")
    finally:
        admin.page.locator("#provider-fake").get_by_role("button", name="Resume").click()
        admin.page.wait_for_selector(".flash")
    assert admin.page.inner_text("#provider-fake .paused") == "no"
    reload_until(admin, f"/console/messages/{message_id}", "#status", "sent", "the message to go once resumed")
    assert fake_provider.count(message_id) == 1
    admin.shot("10-message-sent-after-resume")


def test_a_batch_page_follows_its_progress_without_a_reload(client, visit):
    project = create_project(client)
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    body = {
        "channel": "email",
        "recipients": [{"email": f"r{i}@example.com"} for i in range(3)],
        "content": {"subject": "All", "text": "Hi"},
        "scheduled_at": later,
    }
    batch_id = project.call("POST", "/v1/messages/batch", body).get_json()["batch_id"]
    ours = visit()
    ours.sign_in(project.live_key)
    ours.go(f"/console/batches/{batch_id}")
    expect(ours.page.locator('#progress tr[data-status="scheduled"] .count')).to_have_text("3")
    listed = project.call("GET", f"/v1/messages?batch_id={batch_id}").get_json()["items"]
    for message in listed:
        assert project.call("POST", f"/v1/messages/{message['id']}/cancel").status_code == 200
    expect(ours.page.locator('#progress tr[data-status="cancelled"] .count')).to_have_text("3")
    expect(ours.page.locator('#progress tr[data-status="scheduled"]')).to_have_count(0)
    ours.shot("11-batch-progress")


def test_another_projects_pages_stay_out_of_reach_in_the_browser(client, visit):
    project, other = create_project(client), create_project(client)
    assert other.call("PUT", "/v1/subscribers/theirs", {"email": "theirs@example.com"}).status_code == 201
    mine = {"email": "ada@example.com", "locale": "en", "data": {"plan": "<b>pro</b>"}}
    assert project.call("PUT", "/v1/subscribers/ada", mine).status_code == 201
    made = other.call("POST", "/v1/templates", {"key": "secret-plan", "channel": "email", "subject": "S", "text": "T"})
    assert made.status_code == 201
    suppressed = other.call("POST", "/v1/suppressions", {"channel": "email", "address": "theirs@example.com"})
    assert suppressed.status_code == 201
    hook = other.call("POST", "/v1/webhooks", {"url": "http://127.0.0.1:9/theirs-hook"})
    assert hook.status_code == 201
    batch = other.call(
        "POST",
        "/v1/messages/batch",
        {
            "channel": "email",
            "content": {"subject": "S", "text": "T"},
            "scheduled_at": later(),
            "recipients": [{"email": "theirs@example.com"}],
        },
    )
    assert batch.status_code == 202
    ours = visit()
    ours.sign_in(project.live_key)
    for path in ("/console/subscribers", "/console/templates", "/console/suppressions", "/console/webhooks"):
        ours.go(path)
        assert "theirs" not in ours.page.content() and "secret-plan" not in ours.page.content(), path
        ours.shot(f"12-{path.rsplit('/', 1)[-1]}-without-another-projects")
    for path in (
        "/console/subscribers/theirs",
        "/console/templates/secret-plan",
        f"/console/webhooks/{hook.get_json()['id']}",
        f"/console/batches/{batch.get_json()['batch_id']}",
    ):
        ours.go(path)
        assert ours.page.inner_text("h1") == "404", path
    ours.shot("12-another-projects-batch-404")
    ours.go("/console/operations")
    assert ours.page.inner_text("h1") == "403"
    ours.go("/console/subscribers?q=ADA@example.com")
    ours.page.click('a[href="/console/subscribers/ada"]')
    assert '"plan": "<b>pro</b>"' in ours.page.inner_text("#data")
    ours.shot("13-subscriber")
