"""Open and click tracking and one-click unsubscribe for email, decided at render time.

Tracking is off unless the project switches it on (`settings.tracking.opens`/`clicks`);
a project may keep transactional mail untracked (`transactional: false`), and a template
may switch either on or off for its messages. Bulk and marketing email carries
`List-Unsubscribe` and `List-Unsubscribe-Post: List-Unsubscribe=One-Click` (RFC 8058),
unless its category is one the project requires.

Links are signed tokens (app.content.tokens): a click token carries its URL, so the redirect
needs no database and goes only where a message we rendered pointed — not an open redirect.
They are found by a one-pass tokenizer (app.content.links), in time linear in the body,
whether it was rendered from a template or came in over the API or SMTP.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from app.content import links, tokens
from app.content.tokens import Purpose
from app.enums import Priority

# A transparent 1x1 GIF.
PIXEL = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")
MAX_TRACKED_URL = 2000
UNSUBSCRIBE_CATEGORY = "marketing"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_BODY_END = re.compile(r"</body\s*>", re.IGNORECASE)


@dataclass(frozen=True)
class EmailExtras:
    opens: bool = False
    clicks: bool = False
    unsubscribe: bool = False

    def __bool__(self) -> bool:
        return self.opens or self.clicks or self.unsubscribe


def extras_for(
    project_settings: Mapping[str, Any] | None,
    template_tracking: Mapping[str, Any] | None,
    priority: str,
    category: str | None,
) -> EmailExtras:
    """What one email gets: project switches, transactional default, then the template's word."""
    settings = project_settings or {}
    tracking = settings.get("tracking") or {}
    on = priority != Priority.TRANSACTIONAL or tracking.get("transactional", True)
    opens, clicks = on and bool(tracking.get("opens")), on and bool(tracking.get("clicks"))
    template = template_tracking or {}
    opens = template["opens"] if template.get("opens") is not None else opens
    clicks = template["clicks"] if template.get("clicks") is not None else clicks
    required = category in (settings.get("required_categories") or ())
    bulk = priority == Priority.BULK or category == UNSUBSCRIBE_CATEGORY
    return EmailExtras(opens, clicks, bulk and not required)


def tracked_html(body: str, public_url: str, project_id: str, message_id: str, extras: EmailExtras) -> str:
    """Links rewritten through the click redirect and an open pixel added, as switched on.

    Running it again on its own output changes nothing (a re-prepared message keeps its
    links): our own links are left alone, and a pixel is added only once.
    """
    ours = f"{public_url}/t/"
    claims = {"p": project_id, "m": message_id}
    if extras.clicks:

        def tracked(url: str) -> str | None:
            web = url.lower().startswith(("http://", "https://"))
            if not web or url.startswith(ours) or len(url) > MAX_TRACKED_URL:
                return None
            return f"{public_url}/t/c/{tokens.mint(Purpose.CLICK, {**claims, 'u': url})}"

        body = _rewrite_links(body, tracked)
    if extras.opens and f"{ours}o/" not in body:
        pixel = (
            f'<img src="{public_url}/t/o/{tokens.mint(Purpose.OPEN, claims)}" width="1" height="1" alt="" '
            'style="display:none;border:0">'
        )
        ends = list(_BODY_END.finditer(body))
        body = body[: ends[-1].start()] + pixel + body[ends[-1].start() :] if ends else body + pixel
    return body


def _rewrite_links(body: str, tracked: Callable[[str], str | None]) -> str:
    """Each `<a>` tag's href replaced by what `tracked` makes of its URL (None: kept as it is)."""
    pieces: list[str] = []
    kept_until = 0
    for token in links.tokens(body):
        if token.href is None:
            continue
        start, end = token.href
        replacement = tracked(html.unescape(body[start:end]).strip())
        if replacement is not None:
            pieces += [body[kept_until:start], replacement]
            kept_until = end
    pieces.append(body[kept_until:])
    return "".join(pieces)


def unsubscribe_headers(
    public_url: str, project_id: str, message_id: str, subscriber_id: str | None, address: str, category: str | None
) -> dict[str, str]:
    """RFC 8058 headers; the token turns the category off for the subscriber, or suppresses
    the address when the message went to a raw address."""
    claims: dict[str, Any] = {"p": project_id, "m": message_id, "c": category}
    claims.update({"s": subscriber_id} if subscriber_id else {"a": address})
    url = f"{public_url}/u/{tokens.mint(Purpose.UNSUBSCRIBE, claims)}"
    return {"List-Unsubscribe": f"<{url}>", "List-Unsubscribe-Post": "List-Unsubscribe=One-Click"}


def preferences_url(
    public_url: str, project_id: str, subscriber_id: str, subscriber_created_at: datetime, expires_at: int
) -> str:
    """The subscriber's preference page. The token is the page's only key, so it names the
    project and the subscriber both, and nothing on the page can name another; it names the
    subscriber's creation too, so a subscriber erased and made again under the same id is
    someone the old links no longer reach."""
    claims = {"p": project_id, "s": subscriber_id, "c": creation_stamp(subscriber_created_at)}
    return f"{public_url}/p/{tokens.mint_until(Purpose.PREFERENCES, claims, expires_at)}"


def creation_stamp(created_at: datetime) -> int:
    """A subscriber's creation time in whole microseconds: exact, where a float timestamp is not."""
    return (created_at - EPOCH) // timedelta(microseconds=1)
