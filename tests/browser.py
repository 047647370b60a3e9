"""Debian's chromium for the browser tests, driven by Playwright (never a browser of
Playwright's own), and the guard that keeps it on 127.0.0.1: a page that needs anything
from elsewhere (a CDN) fails its test instead of loading it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason="Debian's chromium is not installed (apt-get install -y chromium; .ci/run installs it)",
)
LAUNCH_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def loopback_only(target: Any, elsewhere: list[str]) -> None:
    """Abort every request `target` (a page or a browser context) makes beyond 127.0.0.1,
    listing it in `elsewhere` for the test to assert on."""

    def guard(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    target.route("**/*", guard)
