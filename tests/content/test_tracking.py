"""Click tracking's link rewriting: linear in the body, and faithful to how HTML reads.

Linearity is shown by counts, not time: the tokenizer cuts the body into consecutive
tokens that cover it once, each scanned only within itself, and their number follows the
body's tags, so a body the old regular expression took minutes on is one token.
"""

from __future__ import annotations

import re

import pytest

from app.content import links
from app.content.tokens import Purpose, verify
from app.content.tracking import EmailExtras, tracked_html

pytestmark = pytest.mark.usefixtures("app")  # tokens are signed with the test settings' key

PUBLIC = "http://127.0.0.1:8000"
CLICKS = EmailExtras(clicks=True)
BODY_SIZE = 256 * 1024


def tracked(body: str) -> str:
    return tracked_html(body, PUBLIC, "p1", "m1", CLICKS)


def clicked_urls(html: str) -> list[str]:
    """The URLs behind the click links of a tracked body, in order."""
    tokens = re.findall(rf"{re.escape(PUBLIC)}/t/c/([\w.-]+)", html)
    return [verify(Purpose.CLICK, token).claims["u"] for token in tokens]


def assert_covered_once(body: str, tokens: list[links.Token]) -> None:
    """The tokens follow each other without gap or overlap from the body's start to its end."""
    assert [t.start for t in tokens] == [0, *(t.end for t in tokens[:-1])]
    assert tokens[-1].end == len(body)


def test_a_body_of_unterminated_link_tags_is_one_token_and_left_as_it_is():
    body = ("<a " * (BODY_SIZE // 3 + 1))[:BODY_SIZE]
    tokens = list(links.tokens(body))
    assert tokens == [links.Token("rest", 0, BODY_SIZE)]  # the first tag never ends, as in a browser
    assert tracked(body) == body


def test_a_body_full_of_links_is_rewritten_link_by_link_in_one_pass():
    fragment = '<a href="https://example.com/{:05d}">x</a> '
    count = BODY_SIZE // len(fragment.format(0))
    body = "".join(fragment.format(i) for i in range(count))
    tokens = list(links.tokens(body))
    assert_covered_once(body, tokens)
    assert [t.kind for t in tokens] == ["tag", "text"] * count  # `</a>` is text: end tags carry no links
    assert clicked_urls(tracked(body)) == [f"https://example.com/{i:05d}" for i in range(count)]


def test_a_tag_whose_attributes_never_end_leaves_the_rest_alone():
    body = '<p>hi</p><a href="https://example.com/a">a</a><a title="never closed ' + "<a href='x'> " * 5000
    tokens = list(links.tokens(body))
    assert_covered_once(body, tokens)
    assert [t.kind for t in tokens] == ["tag", "text", "tag", "text", "rest"]
    assert clicked_urls(tracked(body)) == ["https://example.com/a"]


def test_links_are_read_as_a_browser_reads_them():
    body = (
        "<A HREF='https://example.com/upper' href='https://example.com/second'>"
        '<a title="a > b" href="https://example.com/after-a-quoted-gt">'
        "<a href=https://example.com/unquoted data-x>"
        '<a data-href="https://example.com/not-a-link" href="https://example.com/real">'
        '<!-- <a href="https://example.com/commented"> -->'
        "<script>if (a<b) { s = \"<a href='https://example.com/in-script'>\" }</script>"
        '<abbr href="https://example.com/not-a"><a href="mailto:ada@example.com">'
        '<a href=" https://example.com/?a=1&amp;b=2 ">'
    )
    assert clicked_urls(tracked(body)) == [
        "https://example.com/upper",
        "https://example.com/after-a-quoted-gt",
        "https://example.com/unquoted",
        "https://example.com/real",
        "https://example.com/?a=1&b=2",
    ]
    assert "mailto:ada@example.com" in tracked(body)


def test_rewriting_again_changes_nothing():
    once = tracked('<a href="https://example.com/">x</a>')
    assert tracked(once) == once
