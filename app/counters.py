"""Counters shared by every process, kept in one Redis hash and exported by the API.

Workers come and go (prefork children, autoscaling, several machines); a counter kept in
a worker's memory dies with it and cannot be scraped. Incrementing a Redis hash field is
one round trip per batch, and the API's `/metrics` turns the hash into Prometheus
counters, so one scrape target sees the whole fleet.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import redis
from prometheus_client.core import CounterMetricFamily

logger = logging.getLogger(__name__)

HASH = "tidings:counters"
# name → help text; a counter must be declared here before it is counted.
COUNTERS = {
    "sweeper_recovered": "Messages the sweeper picked up again, by what had happened to them.",
    "provider_pauses": "Times a provider was paused, by provider and cause.",
    "pacing_postponed": "Messages sent back to the broker to wait for a provider's pace, by provider.",
    "breaker_transitions": "Times a provider's circuit breaker changed state, by provider and the state entered.",
    "failover_handovers": "Messages handed from a provider whose circuit is open to the next of its channel.",
    "delivery_follow_ups": "Suppressions added and push tokens removed on a provider's answer, by provider.",
    "inbound_events": "Provider status events received, by provider and what became of them.",
}


def _field(name: str, labels: Mapping[str, str]) -> str:
    return name + "|" + ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def increment(client: redis.Redis, name: str, amount: int = 1, **labels: str) -> None:
    """Count `amount` more; a Redis that cannot be reached loses the count, not the work."""
    assert name in COUNTERS, name
    if amount <= 0:
        return
    try:
        client.hincrby(HASH, _field(name, labels), amount)
    except redis.RedisError as error:
        logger.warning("could not count %s: %s", name, error)


class RedisCounterCollector:
    """A Prometheus collector that reads the shared hash at scrape time."""

    def __init__(self, client: redis.Redis):
        self.client = client

    def collect(self) -> Iterator[CounterMetricFamily]:
        try:
            values = self.client.hgetall(HASH)
        except redis.RedisError:
            return
        families: dict[str, CounterMetricFamily] = {}
        for raw_field, raw_value in values.items():
            name, _, label_text = raw_field.decode().partition("|")
            if name not in COUNTERS:
                continue
            labels = dict(pair.split("=", 1) for pair in label_text.split(",") if pair)
            family = families.get(name)
            if family is None:
                family = families[name] = CounterMetricFamily(f"tidings_{name}", COUNTERS[name], labels=sorted(labels))
            family.add_metric([labels[k] for k in sorted(labels)], float(raw_value))
        yield from families.values()
