"""Retry policy: a fixed ladder of waits with full jitter.

About 30 s, 2 min, 10 min, 30 min, then 2 h: quick enough for a blip, patient enough for
an outage. Full jitter (a uniform draw up to the step) spreads a burst of failures over the
whole step, so a provider that comes back is not hit by every retry in the same second.
"""

from __future__ import annotations

import random

LADDER_SECONDS = (30.0, 120.0, 600.0, 1800.0, 7200.0)


def backoff(attempt: int, scale: float = 1.0, rand: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based)."""
    step = LADDER_SECONDS[min(attempt, len(LADDER_SECONDS)) - 1] * scale
    return (rand or random).uniform(0, step)
