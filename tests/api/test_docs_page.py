"""`/docs` in a real browser with the network cut off from everything but loopback.

Debian's chromium, driven by Playwright (never a browser of Playwright's own): the page
loads every asset from Tidings, lists every operation of the spec, and one can be tried with a
project key through "Authorize" and "Try it out". Any request to another host is aborted and
recorded, and the test fails on it, as it does on a Content-Security-Policy violation.
"""

from __future__ import annotations

import requests

from tests.browser import chromium, loopback_only, needs_chromium

pytestmark = needs_chromium
TIMEOUT_MS = 30_000


def test_docs_page_sends_the_security_headers_and_serves_its_own_assets(live_api):
    page = requests.get(f"{live_api}/docs", timeout=10)
    assert page.status_code == 200
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self';" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    assert "frame-ancestors 'none'" in csp
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert "<script>" not in page.text and "http" not in page.text
    bundle = requests.get(f"{live_api}/docs/assets/swagger-ui-bundle.js", timeout=10)
    assert bundle.status_code == 200 and len(bundle.content) > 100_000
    assert requests.get(f"{live_api}/docs/assets/../../__init__.py", timeout=10).status_code == 404


def test_docs_lists_every_operation_and_tries_one_with_a_project_key(live_api, project):
    operations = sum(
        method in ("get", "put", "post", "patch", "delete")
        for item in requests.get(f"{live_api}/openapi.json", timeout=10).json()["paths"].values()
        for method in item
    )
    outside, violations = [], []
    with chromium() as browser:
        page = browser.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        loopback_only(page, outside)
        page.on(
            "console", lambda message: "Content Security Policy" in message.text and violations.append(message.text)
        )
        page.goto(f"{live_api}/docs")
        page.wait_for_selector(".opblock")
        assert page.locator(".opblock").count() == operations

        page.click("button.authorize")
        dialog = page.locator(".auth-container", has_text="projectKey")
        dialog.locator("input").fill(project.live_key)
        dialog.locator("button.authorize").click()
        page.click("button.btn-done")

        listing = page.locator("#operations-Messages-list_messages")  # tag and operationId
        listing.locator(".opblock-summary").click()
        listing.locator("button.try-out__btn").click()
        listing.locator("button.execute").click()
        status = listing.locator(".live-responses-table .response .response-col_status").first
        status.wait_for()
        assert status.inner_text().strip() == "200"
        assert "Bearer " + project.live_key in listing.locator(".curl").inner_text()
    assert outside == []
    assert violations == []
