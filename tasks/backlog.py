"""Beat's `measure_backlog`: the backlog's numbers (app/delivery/backlog.py), stored for `/metrics`."""

from __future__ import annotations

from app.config import current_settings
from app.db import session_scope
from app.delivery.backlog import pending_lanes, queue_depths
from app.delivery.broker import celery_app
from app.delivery.queues import all_queues
from app.observability.gauges import Gauge, store
from app.redis_client import redis_for


@celery_app.task(name="tidings.measure_backlog")
def measure_backlog() -> dict[str, int]:
    """Store queue depths and lane ages for `/metrics` (beat runs it every few seconds)."""
    config = current_settings()
    depths = queue_depths(config.broker_url, all_queues(config))
    with session_scope(config.database_url) as session:
        lanes = pending_lanes(session)
    gauges = [Gauge("queue_depth", {"queue": queue}, depth) for queue, depth in depths.items()]
    for lane in lanes:
        gauges.append(Gauge("pending_messages", {"lane": lane.name}, lane.count))
        gauges.append(Gauge("oldest_pending_seconds", {"lane": lane.name}, lane.oldest_age_seconds))
    store(redis_for(config.redis_url), gauges)
    return depths
