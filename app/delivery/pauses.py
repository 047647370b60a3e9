"""Paused providers: one Redis key per provider, shared by every worker.

A provider that answers 429 is paused for everyone for its Retry-After, so no other
worker keeps hammering it; an operator may pause one by hand (an outage, a bad key).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

PREFIX = "tidings:paused:"


@dataclass(frozen=True)
class Pause:
    provider: str
    reason: str
    seconds_left: float | None  # None: until resumed by hand


class ProviderPauses:
    def __init__(self, client: redis.Redis):
        self.client = client

    def pause(self, provider: str, seconds: float | None, reason: str) -> None:
        """Pause `provider`; a shorter timed pause never cuts an existing longer one short."""
        key = PREFIX + provider
        if seconds is None:
            self.client.set(key, reason)
            return
        milliseconds = max(int(seconds * 1000), 1)
        current = self.client.pttl(key)
        if current == -1 or current > milliseconds:  # -1: paused until resumed
            return
        self.client.set(key, reason, px=milliseconds)

    def resume(self, provider: str) -> bool:
        return bool(self.client.delete(PREFIX + provider))

    def seconds_left(self, provider: str) -> float | None:
        """None when the provider is not paused; math.inf when paused until resumed."""
        milliseconds = self.client.pttl(PREFIX + provider)
        if milliseconds == -2:
            return None
        return float("inf") if milliseconds == -1 else milliseconds / 1000

    def get(self, provider: str) -> Pause | None:
        """The pause of `provider` (or of a project's own account with it), if any."""
        key = PREFIX + provider
        with self.client.pipeline() as pipe:
            pipe.get(key)
            pipe.pttl(key)
            reason, milliseconds = pipe.execute()
        if reason is None:
            return None
        return Pause(provider, reason.decode(), None if milliseconds == -1 else milliseconds / 1000)

    def all(self) -> list[Pause]:
        names = (key.decode().removeprefix(PREFIX) for key in self.client.scan_iter(match=PREFIX + "*", count=100))
        return sorted((p for p in map(self.get, names) if p is not None), key=lambda p: p.provider)
