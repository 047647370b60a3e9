"""Signed tokens for links and browsers: verified by signature alone, no database read.

Each purpose has its own salt, so a click token can never be replayed as an unsubscribe
token, and every token names its project, which the write that follows checks against the
message or subscriber it touches: a token for another project changes nothing. Expiry is
part of the signed payload, so each purpose chooses its own lifetime.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from itsdangerous import BadSignature, Serializer, URLSafeSerializer
from itsdangerous.encoding import base64_encode

from app.config import current_settings


class Purpose(StrEnum):
    OPEN = "open"
    CLICK = "click"
    UNSUBSCRIBE = "unsubscribe"
    SUBSCRIBER = "subscriber"
    # A recipient's preference page, and the CSRF token of its form (bound to the page's link).
    PREFERENCES = "preferences"
    PREFERENCES_FORM = "preferences-form"


# Tracking and unsubscribe links live in mailboxes for a long time.
LINK_LIFETIME = 365 * 24 * 3600
SUBSCRIBER_TOKEN_PREFIX = "tsub_"


@dataclass(frozen=True)
class Verified:
    claims: dict[str, Any]
    expires_at: int
    expired: bool


class _UncompressedSerializer(URLSafeSerializer):
    """URL-safe tokens without itsdangerous' zlib attempt on every dump.

    Prepare mints an unsubscribe token for every bulk email; trying zlib on each (which
    saves a few bytes of a short JSON payload, if any) was 15% of a prepare worker's CPU.
    Loading is unchanged, so a compressed token minted earlier still verifies.
    """

    def dump_payload(self, obj: Any) -> bytes:
        return base64_encode(Serializer.dump_payload(self, obj))


def _serializer(purpose: Purpose) -> URLSafeSerializer:
    return _UncompressedSerializer(current_settings().secret_key, salt=f"tidings.{purpose}")


def mint(purpose: Purpose, claims: dict[str, Any], lifetime: float = LINK_LIFETIME) -> str:
    return mint_until(purpose, claims, int(time.time() + lifetime))


def mint_until(purpose: Purpose, claims: dict[str, Any], expires_at: int) -> str:
    """A token that expires at a time the caller also tells its reader (a link's `expires_at`)."""
    return _serializer(purpose).dumps({**claims, "x": expires_at})


def verify(purpose: Purpose, token: str) -> Verified | None:
    """The claims of an authentic token (with whether it expired); None for anything forged."""
    try:
        claims = _serializer(purpose).loads(token)
    except BadSignature:
        return None
    if not isinstance(claims, dict) or not isinstance(claims.get("x"), int) or not isinstance(claims.get("p"), str):
        return None
    expires = claims.pop("x")
    return Verified(claims, expires, expired=time.time() >= expires)
