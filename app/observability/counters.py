"""Counters and histograms shared by every process, kept in one Redis hash, exported by the API.

Workers come and go (prefork children, autoscaling, several machines); a number kept in
a worker's memory dies with it and cannot be scraped. So every process adds its counts
to one Redis hash and the API's `/metrics` turns the hash into Prometheus families: one
scrape target sees the whole fleet, and a worker that exits loses nothing it flushed.

A histogram is a counter per bucket (not cumulative: a worker adds to the one bucket a
value falls in) plus a float sum; the collector makes the buckets cumulative at scrape
time. Work is gathered in a `Tally` and written in one pipelined round trip per batch,
never per message.

A hash field is `name|labels[|part]`, labels being `key=value` pairs joined by commas. Values
are percent-quoted wherever they hold a separator (or anything but what routes, queues and
provider names are made of), so no value can be read back as other labels; a field that is
not the exact encoding of what it decodes to (written before values were quoted, or by hand)
is left out of the scrape rather than break it. The Prometheus text itself is produced by
`prometheus_client`, which escapes backslashes, double quotes and newlines in label values.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from urllib.parse import quote, unquote

import redis
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from app.redis_client import hash_of

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
    "pause_postponed": "Messages sent back to the broker because their provider was paused.",
    "messages": "Messages that reached an outcome in prepare or deliver, by channel, provider and outcome.",
    "delivery_attempts": "Messages handed to a provider (each try counts), by channel and provider.",
    "retries": "Messages that failed transiently and will be tried again, by channel and provider.",
    "dead_letters": "Messages that ran out of attempts, by channel and provider.",
    "http_requests": "API requests answered, by method, route and status.",
    "coalesced_tasks": "Prepare tasks the API published for single sends, by priority (app/delivery/coalescer.py).",
    "coalesced_messages": "Messages those prepare tasks carried, by priority: sends per task is this over that.",
    "poison_messages": "Items (messages, workflow runs, webhook deliveries, reports) failed alone because their "
    "batch step could not handle them, by stage.",
    "retention_deleted": "Finished messages deleted by retention, with their content and events, by project.",
}

# A Redis round trip is ~0.1 ms; provider calls take 10 ms to seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# From accept to the provider: sub-second when idle, minutes behind a campaign or a pause.
DELIVERY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0)
# name → (help text, bucket upper bounds); +Inf is implied.
HISTOGRAMS: dict[str, tuple[str, tuple[float, ...]]] = {
    "http_request_seconds": ("Time to answer an API request, by method and route.", LATENCY_BUCKETS),
    "provider_call_seconds": ("Time one provider batch call took, by provider.", LATENCY_BUCKETS),
    "accept_to_provider_seconds": (
        "From the API accepting a message to the provider taking it, by channel and provider.",
        DELIVERY_BUCKETS,
    ),
}
SUM = "sum"
INF = "+Inf"
# What may follow a histogram's labels in a field: a bucket's upper bound, or the sum.
HISTOGRAM_PARTS = {name: {*(repr(b) for b in bounds), INF, SUM} for name, (_, bounds) in HISTOGRAMS.items()}


# Kept as they are in label values: what routes (`/v1/messages/<message_id>`), queues and
# names are made of. Everything else, `|`, `,`, `=` and `%` among it, is percent-quoted.
PLAIN = "/<>"


def labels_text(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={quote(v, safe=PLAIN)}" for k, v in sorted(labels.items()))


class Tally:
    """Counts and observations gathered in memory, written to Redis in one round trip."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.sums: defaultdict[str, float] = defaultdict(float)

    def count(self, name: str, amount: int = 1, **labels: str) -> None:
        assert name in COUNTERS, name
        if amount > 0:
            self.counts[f"{name}|{labels_text(labels)}"] += amount

    def observe(self, name: str, values: Iterable[float], **labels: str) -> None:
        """Add every value to histogram `name`: a bucket count each, and their sum."""
        _, bounds = HISTOGRAMS[name]
        prefix = f"{name}|{labels_text(labels)}|"
        for value in values:
            index = bisect_left(bounds, value)
            self.counts[prefix + (repr(bounds[index]) if index < len(bounds) else INF)] += 1
            self.sums[prefix + SUM] += value

    def merge(self, other: Tally) -> None:
        self.counts.update(other.counts)
        for field, value in other.sums.items():
            self.sums[field] += value

    def write(self, pipe: redis.client.Pipeline) -> None:
        """Queue the increments on `pipe`, for callers that send more in the same round trip."""
        for field, amount in self.counts.items():
            pipe.hincrby(HASH, field, amount)
        for field, value in self.sums.items():
            pipe.hincrbyfloat(HASH, field, value)
        self.counts.clear()
        self.sums.clear()

    def flush(self, client: redis.Redis) -> None:
        if self.counts:
            send(client, self.write)


def send(client: redis.Redis, *writers: Callable[[redis.client.Pipeline], None]) -> None:
    """Run the writers on one pipeline and send it; a Redis that cannot be reached loses
    the numbers, never the work that produced them."""
    try:
        with client.pipeline(transaction=False) as pipe:
            for write in writers:
                write(pipe)
            pipe.execute()
    except redis.RedisError as error:
        logger.warning("could not record metrics: %s", error)


def increment(client: redis.Redis, name: str, amount: int = 1, **labels: str) -> None:
    """Count `amount` more of one counter, at once."""
    tally = Tally()
    tally.count(name, amount, **labels)
    tally.flush(client)


class BufferedTally:
    """A process-wide tally flushed at most once per `interval`: for per-request numbers.

    The API counts every request; buffering keeps that off Redis's round trip per request.
    A scrape flushes first, and a gunicorn worker flushes as it exits (app/runtime/server.py).
    """

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._tally = Tally()
        self._lock = threading.Lock()
        self._flushed_at = time.monotonic()

    def add(self, client: redis.Redis, tally: Tally) -> None:
        with self._lock:
            self._tally.merge(tally)
            if time.monotonic() - self._flushed_at < self.interval:
                return
            pending, self._tally = self._tally, Tally()
            self._flushed_at = time.monotonic()
        pending.flush(client)

    def flush(self, client: redis.Redis) -> None:
        with self._lock:
            pending, self._tally = self._tally, Tally()
            self._flushed_at = time.monotonic()
        pending.flush(client)


class RedisCounterCollector:
    """A Prometheus collector that reads the shared hash at scrape time."""

    def __init__(self, client: redis.Redis):
        self.client = client

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        try:
            values = hash_of(self.client, HASH)
        except redis.RedisError:
            return
        counters: dict[str, dict[str, float]] = defaultdict(dict)
        histograms: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
        for raw_field, raw_value in values.items():
            name, _, rest = raw_field.decode().partition("|")
            label_text, *part = rest.split("|")
            if not well_formed(label_text):
                continue
            if name in HISTOGRAMS and len(part) == 1 and part[0] in HISTOGRAM_PARTS[name]:
                histograms[name][label_text][part[0]] = float(raw_value)
            elif name in COUNTERS and not part:
                counters[name][label_text] = float(raw_value)
        # Every declared family is exported, counted yet or not, so dashboards and alert
        # rules find the metric from the first scrape.
        for name, help_text in COUNTERS.items():
            yield _counter_family(name, help_text, counters.get(name, {}))
        for name in HISTOGRAMS:
            yield _histogram_family(name, histograms.get(name, {}))


def parse_labels(label_text: str) -> dict[str, str]:
    pairs = (pair.partition("=") for pair in label_text.split(",") if pair)
    return {key: unquote(value) for key, _, value in pairs}


def well_formed(label_text: str) -> bool:
    """Whether `label_text` is exactly how `labels_text` writes what it decodes to; a field
    that is not (see the module's docstring) is left out of the scrape."""
    return labels_text(parse_labels(label_text)) == label_text


def _counter_family(name: str, help_text: str, series: Mapping[str, float]) -> CounterMetricFamily:
    """Each series with the labels it was counted with, so one whose labels differ from its
    neighbours' (a label added in a later release, a field written by hand) cannot fail the
    scrape."""
    family = CounterMetricFamily(f"tidings_{name}", help_text)
    for label_text, value in series.items():
        family.add_sample(f"{family.name}_total", parse_labels(label_text), value)
    return family


def _histogram_family(name: str, series: Mapping[str, Mapping[str, float]]) -> HistogramMetricFamily:
    """Cumulative buckets, count and sum per series, each with its own labels (as counters)."""
    help_text, bounds = HISTOGRAMS[name]
    family = HistogramMetricFamily(f"tidings_{name}", help_text)
    for label_text, parts in series.items():
        labels = parse_labels(label_text)
        running = 0.0
        for bound in [*(repr(b) for b in bounds), INF]:
            running += parts.get(bound, 0.0)
            family.add_sample(f"{family.name}_bucket", {**labels, "le": bound}, running)
        family.add_sample(f"{family.name}_count", labels, running)
        family.add_sample(f"{family.name}_sum", labels, parts.get(SUM, 0.0))
    return family
