"""Gauges measured by beat (queue depths, pending ages), kept in Redis for `/metrics`.

A queue's depth or a lane's oldest message is one number for the whole fleet, measured
by one process on a schedule; the API exports the last measurement with its time, so a
scrape never queries the broker or PostgreSQL itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import redis
from prometheus_client.core import GaugeMetricFamily
from redis.typing import EncodableT, FieldT

from app.observability.counters import labels_text, parse_labels, well_formed
from app.redis_client import hash_of

HASH = "tidings:gauges"
MEASURED_AT = "measured_at"
GAUGES = {
    "queue_depth": "Tasks waiting in each queue: up to 500 message ids each, or a bulk lane's token per chunk.",
    "pending_messages": "Messages waiting for a worker, by lane (the queue they are bound for).",
    "oldest_pending_seconds": "Age of the oldest message waiting for a worker, by lane.",
}


@dataclass(frozen=True)
class Gauge:
    name: str
    labels: Mapping[str, str]
    value: float


def store(client: redis.Redis, gauges: Sequence[Gauge], now: float | None = None) -> None:
    """Replace the last measurement whole, so a lane that emptied disappears."""
    fields: dict[FieldT, EncodableT] = {f"{g.name}|{labels_text(g.labels)}": g.value for g in gauges}
    fields[MEASURED_AT] = now or time.time()
    with client.pipeline(transaction=True) as pipe:
        pipe.delete(HASH)
        pipe.hset(HASH, mapping=fields)
        pipe.execute()


def measured_at(client: redis.Redis) -> float | None:
    value = client.hget(HASH, MEASURED_AT)
    return float(value) if value is not None else None


class GaugeCollector:
    """Exports the last measurement, and when it was taken (stale gauges mean beat is down)."""

    def __init__(self, client: redis.Redis):
        self.client = client

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            values = hash_of(self.client, HASH)
        except redis.RedisError:
            return
        series: dict[str, dict[str, float]] = {name: {} for name in GAUGES}
        for raw_field, raw_value in values.items():
            field = raw_field.decode()
            if field == MEASURED_AT:
                yield GaugeMetricFamily(
                    "tidings_gauges_measured_at_seconds", "When beat last measured the gauges.", float(raw_value)
                )
                continue
            name, _, label_text = field.partition("|")
            if name in series and well_formed(label_text):
                series[name][label_text] = float(raw_value)
        # Every family is exported, measured yet or not (no lane waiting is an empty family).
        for name, measured in series.items():
            family = GaugeMetricFamily(f"tidings_{name}", GAUGES[name])
            for label_text, value in measured.items():
                family.add_sample(family.name, parse_labels(label_text), value)
            yield family
