"""Secrets at rest: projects' own provider credentials, sealed with TIDINGS_SECRET_KEY.

Fernet (AES-128-CBC with an HMAC-SHA256 tag) under a key derived from the secret key with
HKDF, so the stored text is useless without the deployment's secret, and tampering with
it is detected rather than decrypted into garbage. Changing TIDINGS_SECRET_KEY makes the
stored credentials unreadable: projects must then set theirs again.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from functools import cache

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

# Names the purpose, so the same secret key derives other, unrelated keys elsewhere.
PURPOSE = b"tidings provider accounts v1"


class SealBroken(Exception):
    """Sealed text that this secret key did not seal (another key, or altered)."""


@cache
def _fernet(secret_key: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=PURPOSE).derive(secret_key.encode())
    return Fernet(base64.urlsafe_b64encode(key))


def seal(secret_key: str, values: Mapping[str, str]) -> str:
    return _fernet(secret_key).encrypt(json.dumps(dict(values), sort_keys=True).encode()).decode()


def unseal(secret_key: str, sealed: str) -> dict[str, str]:
    try:
        return json.loads(_fernet(secret_key).decrypt(sealed.encode()))
    except InvalidToken:
        raise SealBroken("the stored credentials cannot be read with this TIDINGS_SECRET_KEY") from None
