"""The nightly retention run (beat), bounded in time so it never overlaps the next one."""

from __future__ import annotations

import logging

from app.config import current_settings
from app.db import session_factory
from app.delivery.broker import celery_app
from app.delivery.retention import purge
from app.observability.counters import Tally
from app.redis_client import redis_for

logger = logging.getLogger(__name__)

# Well inside the task's hard time limit; whatever is left goes the next night.
MAX_SECONDS = 200


@celery_app.task(name="tidings.purge", soft_time_limit=MAX_SECONDS + 30, time_limit=MAX_SECONDS + 60)
def purge_expired() -> dict[str, int]:
    config = current_settings()
    report = purge(session_factory(config.database_url), max_seconds=MAX_SECONDS)
    tally = Tally()
    for project, deleted in report.deleted.items():
        tally.count("retention_deleted", deleted, project=project)
    tally.flush(redis_for(config.redis_url))
    logger.info(
        "retention deleted %d messages",
        report.total,
        extra={"deleted": report.deleted, "files": report.files, "finished": report.finished},
    )
    return report.deleted
