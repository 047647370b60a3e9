"""Standard Webhooks signatures (standardwebhooks.com), which Svix uses too.

We sign the webhooks we send this way (the `webhook` provider) and Resend signs the status
webhooks it sends us this way, so both ends share one implementation: HMAC-SHA256 of
`{id}.{timestamp}.{body}` under the base64 key of a `whsec_` secret, sent as `v1,<base64>`;
a header may carry several space-separated signatures while a secret is being rotated.
"""

from __future__ import annotations

import base64
import hashlib
import hmac


def secret_key(secret: str, setting: str) -> bytes:
    """The key inside a `whsec_` secret; ValueError naming `setting` when it is malformed."""
    if not secret.startswith("whsec_"):
        raise ValueError(f"{setting} must start with whsec_")
    encoded = secret.removeprefix("whsec_")
    try:
        # Svix secrets may come without base64 padding.
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except ValueError:
        raise ValueError(f"{setting} must be whsec_ followed by base64") from None


def sign(key: bytes, message_id: str, timestamp: str, body: bytes) -> str:
    signed = message_id.encode() + b"." + timestamp.encode() + b"." + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def verify(key: bytes, message_id: str, timestamp: str, body: bytes, header: str) -> bool:
    """True when one of the header's `v1` signatures is ours for this id, time and body."""
    expected = sign(key, message_id, timestamp, body).encode()
    return any(hmac.compare_digest(expected, candidate.encode()) for candidate in header.split())
