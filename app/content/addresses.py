"""Addresses are compared in one normal form, wherever they come from.

A message's recipient, a subscriber's email and a suppression entry are all normalised by
this one function before they are stored or compared, so `Ada@Example.com ` can never slip
past a suppression written as `ada@example.com`.
"""

from __future__ import annotations


def normalise_address(kind: str, value: str) -> str:
    """An email's case and surrounding spaces never matter; other addresses only lose spaces.

    `kind` is an address kind (`email`, `phone`, …) or a channel: `email` names both.
    """
    return value.strip().lower() if kind == "email" else value.strip()
