"""Sealed credentials: readable with the secret key that sealed them, and with no other."""

from __future__ import annotations

import pytest

from app.vault import SealBroken, seal, unseal

KEY = "a-secret-key-of-the-deployment"


def test_what_is_sealed_opens_with_the_same_key_and_shows_nothing():
    sealed = seal(KEY, {"POSTMARK_SERVER_TOKEN": "pm-token-123", "EMAIL_FROM": "a@b.test"})
    assert "pm-token-123" not in sealed and "POSTMARK" not in sealed
    assert unseal(KEY, sealed) == {"POSTMARK_SERVER_TOKEN": "pm-token-123", "EMAIL_FROM": "a@b.test"}
    assert seal(KEY, {"A": "b"}) != seal(KEY, {"A": "b"})  # a fresh IV every time


def test_another_key_or_an_altered_text_cannot_open_it():
    sealed = seal(KEY, {"A": "b"})
    with pytest.raises(SealBroken):
        unseal("another-secret-key-entirely", sealed)
    altered = sealed[:20] + ("A" if sealed[20] != "A" else "B") + sealed[21:]
    with pytest.raises(SealBroken):
        unseal(KEY, altered)
