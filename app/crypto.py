"""Secrets at rest: Fernet (AES-128-CBC + HMAC-SHA256) under a key derived from TIDINGS_SECRET_KEY.

A database dump alone then reveals no webhook signing secret. The key is derived with
HKDF rather than used as is, so the same TIDINGS_SECRET_KEY can also sign tokens
(app.content.tokens) without one use weakening the other.
"""

from __future__ import annotations

import base64
from functools import cache

from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from app.config import current_settings
from providers import signing


def derived_key(secret_key: str, purpose: bytes) -> bytes:
    """A 32-byte key for one purpose (`purpose` is HKDF's info): keys for different uses of
    TIDINGS_SECRET_KEY are independent, so none can stand in for another."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(secret_key.encode())


@cache
def _fernet(secret_key: str) -> Fernet:
    return Fernet(base64.urlsafe_b64encode(derived_key(secret_key, b"tidings secrets at rest v1")))


def encrypt(text: str) -> str:
    return _fernet(current_settings().secret_key).encrypt(text.encode()).decode()


def decrypt(token: str) -> str:
    """Raises cryptography.fernet.InvalidToken when the key changed or the token was altered."""
    return _fernet(current_settings().secret_key).decrypt(token.encode()).decode()


def signing_key(stored: str) -> bytes:
    """The HMAC key inside a stored (encrypted) `whsec_` secret: outbound endpoints' and the
    webhook channel's are kept the same way. InvalidToken as `decrypt`."""
    return signing.secret_key(decrypt(stored), "webhook signing secret")
