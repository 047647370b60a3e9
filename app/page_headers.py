"""The headers of every page Tidings serves to a person (/docs, the console, the preference
page): each page's own Content-Security-Policy, and the same guard rails beside it — never
framed by another site, no Referer to leak a link that is a key, no content-type guessing."""

from __future__ import annotations


def page_headers(content_security_policy: str, **extra: str) -> dict[str, str]:
    """The headers for a page with `content_security_policy`; `extra` (underscores for dashes)
    adds a page's own, such as Cache_Control="no-store"."""
    return {
        "Content-Security-Policy": content_security_policy,
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        **{name.replace("_", "-"): value for name, value in extra.items()},
    }
