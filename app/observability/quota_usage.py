"""Daily quota use as the quota counts it, kept in Redis for `/metrics` and the digest.

Each project's day ends at its own midnight, so finding today's counter of every project
would take its settings from PostgreSQL. Instead the quota's Lua scripts (app/access/quota.py)
note a (project, channel)'s use, limit and reset time here whenever they change it, and a
reader takes the one hash: an entry whose day is over counts nothing and is dropped. The
series are per project and channel, as the other per-project metrics are, and only for
projects that sent on a quota'd channel today.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from prometheus_client.core import GaugeMetricFamily

from app.observability.counters import labels_text, parse_labels, well_formed
from app.redis_client import hash_of

HASH = "tidings:quota:usage"


def usage_field(project_id: str, channel: str) -> str:
    """The hash field of one project's channel; its value is "used limit resets_at" (Unix seconds)."""
    return labels_text({"project": project_id, "channel": channel})


@dataclass(frozen=True)
class Usage:
    project: str
    channel: str
    used: int
    limit: int
    resets_at: datetime

    @property
    def remaining(self) -> int:
        return max(self.limit - self.used, 0)


def current_usage(client: redis.Redis, project: str | None = None, now: float | None = None) -> list[Usage]:
    """Every (project, channel) that used a quota today, by project and channel."""
    now = time.time() if now is None else now
    found, over = [], []
    for raw_field, raw_value in hash_of(client, HASH).items():
        field = raw_field.decode()
        used, limit, resets_at = (float(part) for part in raw_value.split())
        if resets_at <= now:
            over.append(field)
            continue
        labels = parse_labels(field) if well_formed(field) else {}
        if {"project", "channel"} == labels.keys() and project in (None, labels["project"]):
            ends = datetime.fromtimestamp(resets_at, UTC)
            found.append(Usage(labels["project"], labels["channel"], int(used), int(limit), ends))
    if over:
        client.hdel(HASH, *over)
    return sorted(found, key=lambda usage: (usage.project, usage.channel))


class QuotaUsageCollector:
    """`tidings_daily_quota_used` and `tidings_daily_quota_limit`, per project and channel."""

    def __init__(self, client: redis.Redis):
        self.client = client

    def collect(self) -> Iterator[GaugeMetricFamily]:
        used = GaugeMetricFamily(
            "tidings_daily_quota_used", "Messages counted against today's quota.", labels=["project", "channel"]
        )
        limit = GaugeMetricFamily(
            "tidings_daily_quota_limit", "The daily quota those are counted against.", labels=["project", "channel"]
        )
        try:
            usages = current_usage(self.client)
        except redis.RedisError:
            usages = []
        for usage in usages:
            used.add_metric([usage.project, usage.channel], usage.used)
            limit.add_metric([usage.project, usage.channel], usage.limit)
        yield used
        yield limit
