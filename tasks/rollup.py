"""Beat's `fold_counts`: the digest's counters folded and compacted (app/observability/rollup.py)."""

from __future__ import annotations

from app.config import current_settings
from app.db import session_scope
from app.delivery.broker import celery_app
from app.observability.rollup import BATCH, MAX_BATCHES, compact, fold


@celery_app.task(name="tidings.fold_counts")
def fold_counts() -> int:
    """Fold what the trigger appended since the last run, a transaction per batch."""
    total = 0
    for _ in range(MAX_BATCHES):
        with session_scope(current_settings().database_url) as session:
            moved = fold(session)
        total += moved
        if moved < BATCH:
            break
    with session_scope(current_settings().database_url) as session:
        compact(session)
    return total
