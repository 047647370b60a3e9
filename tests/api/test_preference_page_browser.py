"""The preference page in a real browser: Debian's headless Chromium, driven by Playwright,
against the API over real HTTP on 127.0.0.1, with every request elsewhere aborted.

A recipient opens their link, turns a category off with the keyboard alone, saves, and
sees the confirmation; the page is screenshotted at desktop and phone size into the test's
own folder (pytest's tmp_path, printed) for a person to look at.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from tests.api.preference_pages import audience, link
from tests.api.test_preference_page_flow import AT_ANY_HOUR, TEMPLATE, rendered_text, send
from tests.browser import chromium, loopback_only, needs_chromium

pytestmark = needs_chromium
PHONE = {"width": 390, "height": 844}
# Tab presses to walk the whole page: a bound, so a focus that never arrives fails the test.
MAX_TABS = 40
# WCAG 2 AA: 4.5:1 for body text.
AA_CONTRAST = 4.5
# Each element's text colour and the background it is drawn on (the nearest one not transparent).
COLOURS = """selector => [...document.querySelectorAll(selector)].map(element => {
  let behind = element;
  while (behind && getComputedStyle(behind).backgroundColor === 'rgba(0, 0, 0, 0)') behind = behind.parentElement;
  return [getComputedStyle(element).color, behind ? getComputedStyle(behind).backgroundColor : 'rgb(255, 255, 255)'];
})"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def offline(browser: Any) -> Iterator[tuple[Any, list[str]]]:
    """A browser context that reaches 127.0.0.1 only; what it tried elsewhere is listed."""
    context = browser.new_context()
    elsewhere: list[str] = []
    loopback_only(context, elsewhere)
    yield context, elsewhere
    context.close()


def tab_to(page: Any, element_id: str) -> None:
    """Move the focus with Tab until it is on the element; fail with where it got to."""
    seen = []
    for _ in range(MAX_TABS):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "document.activeElement && (document.activeElement.id || document.activeElement.textContent)"
        )
        seen.append(focused)
        if focused == element_id:
            return
    pytest.fail(f"Tab never reached {element_id!r}; the focus went through {seen}")


def test_a_recipient_turns_a_category_off_with_the_keyboard_and_sees_it_saved(client, live_api, offline, tmp_path):
    context, elsewhere = offline
    project = audience(client)
    page = context.new_page()
    page.goto(live_api + link(project))
    expect(page.get_by_role("heading", level=1)).to_have_text("What Acme sends you")
    page.screenshot(path=tmp_path / "preference-page.png", full_page=True)

    news = page.get_by_role("group", name="Neuigkeiten").get_by_role("checkbox", name="Email")
    expect(news).to_be_checked()
    security = page.get_by_role("group", name="Security alerts").get_by_role("checkbox", name="Email")
    expect(security).to_be_disabled()
    expect(security).to_be_checked()

    tab_to(page, "category.news.email")
    page.keyboard.press("Space")
    expect(news).not_to_be_checked()
    tab_to(page, "Save my choices")
    page.keyboard.press("Enter")

    expect(page.get_by_role("status")).to_have_text("Saved. Your choices apply to the next messages.")
    saved = page.get_by_role("group", name="Neuigkeiten").get_by_role("checkbox", name="Email")
    expect(saved).not_to_be_checked()
    page.screenshot(path=tmp_path / "preference-page-saved.png", full_page=True)
    stored = project.call("GET", "/v1/subscribers/u1/preferences").get_json()
    assert stored["categories"] == {"news": {"email": False}}
    assert elsewhere == []
    print(f"screenshots in {tmp_path}")


def luminance(css: str) -> float:
    """WCAG relative luminance of an `rgb(r, g, b)` colour."""
    channels = [int(part) / 255 for part in css[css.index("(") + 1 : css.index(")")].split(",")[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(foreground: str, background: str) -> float:
    lighter, darker = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def test_every_kind_of_text_on_the_page_has_aa_contrast(client, live_api, offline):
    context, _ = offline
    project = audience(client)
    page = context.new_page()
    page.goto(live_api + link(project))
    # A refused save, so the error texts are on the page too.
    page.get_by_label("From").fill("22:00")
    page.get_by_role("button", name="Save my choices").click()
    expect(page.get_by_role("alert")).to_be_visible()
    texts = "h1, h2, p, legend, label, button, option, .problem a, .error"
    pairs = page.evaluate(COLOURS, texts)
    assert len(pairs) >= 20
    low = [(fg, bg, round(contrast(fg, bg), 2)) for fg, bg in pairs if contrast(fg, bg) < AA_CONTRAST]
    assert low == []


def test_the_page_fits_a_phone_without_sideways_scrolling(client, live_api, offline, tmp_path):
    context, elsewhere = offline
    project = audience(client)
    page = context.new_page()
    page.set_viewport_size(PHONE)
    page.goto(live_api + link(project))
    expect(page.get_by_role("button", name="Save my choices")).to_be_visible()
    width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width[0] <= width[1], f"the page is {width[0]} px wide in a {width[1]} px viewport"
    page.screenshot(path=tmp_path / "preference-page-phone.png", full_page=True)
    # The stylesheet came from Tidings and applied: the button spans the phone's width.
    button = page.get_by_role("button", name="Save my choices").bounding_box()
    main = page.locator("main").bounding_box()
    assert button is not None and main is not None
    assert button["width"] > main["width"] * 0.8
    assert elsewhere == []
    print(f"screenshots in {tmp_path}")


@pytest.mark.usefixtures("worker")
def test_a_category_turned_off_in_the_browser_skips_the_next_message_of_it(client, engine, live_api, offline, tmp_path):
    """The whole path a recipient takes: the link in a message they got, the page in a
    browser, a switch turned off, and the next message of that category skipped."""
    context, elsewhere = offline
    project = audience(client, AT_ANY_HOUR)
    assert project.call("POST", "/v1/templates", TEMPLATE).status_code == 201
    first = send(project, "news")
    assert project.wait_for(first)["status"] == "sent"
    url = re.search(r"https?://\S+/p/[A-Za-z0-9_.-]+", rendered_text(engine, first))
    assert url is not None
    page = context.new_page()
    page.goto(live_api + urlsplit(url.group()).path)
    page.get_by_role("group", name="Neuigkeiten").get_by_role("checkbox", name="Email").uncheck()
    page.get_by_role("button", name="Save my choices").click()
    expect(page.get_by_role("status")).to_have_text("Saved. Your choices apply to the next messages.")
    page.screenshot(path=tmp_path / "preference-page-from-a-message.png", full_page=True)
    skipped = project.wait_for(send(project, "news"))
    assert skipped["status"] == "skipped"
    assert skipped["events"][-1]["data"] == {"reason": "preference", "preference": "categories.news.email"}
    assert elsewhere == []
