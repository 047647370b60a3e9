"""The links of an HTML body, found in one forward pass: click tracking's tokenizer.

Bodies come from templates, API callers and SMTP ingress, so they are untrusted and may
be built to be slow. A regular expression that looks for `href` after every `<a` scans
to the end of the body from each one (quadratic: 24 KB of `<a ` took seconds), and the
standard library's HTMLParser has quadratic cases of its own on malformed input in the
Python versions we run on. So this is a small tokenizer of the HTML syntax that matters
here, in the spirit of the WHATWG tokenizer: tags with their attributes (quoted or not,
`>` inside quotes included), comments, and the raw text of `<script>` and `<style>`.

Every step starts where the previous one ended and never looks back, so the work is
linear in the body. A tag, comment or raw text that never ends swallows the rest of the
body, as in a browser: nothing after it is a link.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_TAG = re.compile(r"<(!--|[a-zA-Z][^\s/>]*)")  # a comment, or a start tag and its name
_BETWEEN = re.compile(r"[\s/]*")  # before an attribute ('/' as in <br/>)
_NAME = re.compile(r"[^\s/>][^\s/>=]*")  # an attribute's name
_EQUALS = re.compile(r"\s*=\s*")
_UNQUOTED = re.compile(r"[^\s>]*")
_RAW_TEXT_ENDS = {name: re.compile(rf"</{name}[\s/>]", re.IGNORECASE) for name in ("script", "style")}


@dataclass(frozen=True)
class Token:
    """A piece of the body: `text`, `tag`, `comment`, `raw` (script or style content) or
    `rest` (an unterminated construct and all after it); `href` is where an `<a>` tag's
    link is, as (start, end) of its value."""

    kind: str
    start: int
    end: int
    href: tuple[int, int] | None = None


def tokens(body: str) -> Iterator[Token]:
    """The body as consecutive tokens that cover it exactly, in order."""
    position = 0
    while position < len(body):
        opening = _TAG.search(body, position)
        if opening is None:
            yield Token("text", position, len(body))
            return
        if opening.start() > position:
            yield Token("text", position, opening.start())
        token = _comment(body, opening) if opening.group(1) == "!--" else _tag(body, opening)
        if token is None:
            yield Token("rest", opening.start(), len(body))
            return
        yield token
        position = token.end
        raw_end = _RAW_TEXT_ENDS.get(opening.group(1).lower())
        if raw_end is not None:
            close = raw_end.search(body, position)
            end = len(body) if close is None else close.start()
            if end > position:
                yield Token("raw", position, end)
            position = end


def _comment(body: str, opening: re.Match[str]) -> Token | None:
    close = body.find("-->", opening.end())
    return None if close < 0 else Token("comment", opening.start(), close + 3)


def _skip(pattern: re.Pattern[str], body: str, at: int) -> int:
    """Where `pattern` stops matching from `at`: a pattern that matches the empty string matches anywhere."""
    found = pattern.match(body, at)
    assert found is not None
    return found.end()


def _tag(body: str, opening: re.Match[str]) -> Token | None:
    """One start tag from its name to its `>`; None when it never ends."""
    is_link = opening.group(1).lower() == "a"
    at = opening.end()
    href = None
    while True:
        at = _skip(_BETWEEN, body, at)
        if at >= len(body):
            return None
        if body[at] == ">":
            return Token("tag", opening.start(), at + 1, href)
        named = _NAME.match(body, at)
        assert named is not None  # what _BETWEEN stopped at is none of the characters a name cannot start with
        name = named.group()
        at += len(name)
        equals = _EQUALS.match(body, at)
        if equals is None:
            continue
        at = equals.end()
        if at < len(body) and body[at] in "\"'":
            close = body.find(body[at], at + 1)
            if close < 0:
                return None
            value = (at + 1, close)
            at = close + 1
        else:
            value = (at, _skip(_UNQUOTED, body, at))
            at = value[1]
        if is_link and href is None and name.lower() == "href":
            href = value  # of two hrefs the first wins, as in a browser
