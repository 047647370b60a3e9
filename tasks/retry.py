"""Retry policy: exponential backoff with jitter.

The random half spreads a burst of failures over the window, so a provider that comes
back is not hit by every retry in the same second; the fixed half keeps a retry from
coming back almost at once.
"""

from __future__ import annotations

import random

BASE_DELAY = 30.0
FACTOR = 4.0
MAX_DELAY = 2 * 60 * 60.0


def backoff(attempt: int, rand: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based): ~30 s, 2 min, 8 min, …, 2 h."""
    ceiling = min(BASE_DELAY * FACTOR ** (attempt - 1), MAX_DELAY)
    return (rand or random).uniform(ceiling / 2, ceiling)
