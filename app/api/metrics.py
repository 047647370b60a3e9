"""`/metrics`: Prometheus text for the whole fleet.

Nothing here is per process: workers add their counts and histograms to Redis
(app/observability/counters.py), beat stores the backlog gauges (app/observability/gauges.py), provider pause and
breaker state is read where the workers keep it, and daily quota use where the API counts it
(app/observability/quota_usage.py). So one scrape of any API process sees every worker on
every machine, however many prefork children or autoscaled workers came and went.

With METRICS_TOKEN set, a scrape must bring it as a bearer token: the numbers name
projects and providers, and the API may face the internet.
"""

from __future__ import annotations

from collections.abc import Iterator

from flask import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from app.access.auth import bearer_is, unauthorized
from app.api.blueprint import Blueprint
from app.api.context import Context, context
from app.api.contract import METRICS_TOKEN, OPERATIONS, Access
from app.api.requests import request_tally
from app.observability.counters import RedisCounterCollector
from app.observability.gauges import GaugeCollector
from app.observability.quota_usage import QuotaUsageCollector
from app.services.operations import BREAKER_STATES, provider_states


def require_metrics_token() -> None:
    token = context().settings.metrics_token
    if token is not None and not bearer_is(token):
        unauthorized("/metrics needs the metrics token (METRICS_TOKEN) as a bearer token.")


blp = Blueprint(
    "metrics",
    __name__,
    access=Access((METRICS_TOKEN,), require_metrics_token, needed=lambda settings: settings.metrics_token is not None),
    tag=OPERATIONS,
    description="Prometheus metrics.",
)


class ProviderStateCollector:
    """Paused providers and circuit-breaker states, read from Redis at scrape time."""

    def __init__(self, ctx: Context):
        self.ctx = ctx

    def collect(self) -> Iterator[GaugeMetricFamily]:
        paused = GaugeMetricFamily("tidings_provider_paused", "1 while a provider is paused.", labels=["provider"])
        breaker = GaugeMetricFamily(
            "tidings_provider_breaker_state",
            "1 for the state each provider's circuit breaker is in.",
            labels=["provider", "state"],
        )
        for state in provider_states(self.ctx.settings, self.ctx.redis):
            paused.add_metric([state["name"]], float(state["paused"]))
            for name in BREAKER_STATES:
                breaker.add_metric([state["name"], name], float(state["breaker"] == name))
        yield paused
        yield breaker


@blp.route("/metrics")
@blp.doc(
    responses={
        "200": {
            "description": "Prometheus text exposition of the whole fleet.",
            "content": {
                "text/plain": {
                    "schema": {"type": "string"},
                    "example": '# TYPE tidings_provider_paused gauge\ntidings_provider_paused{provider="ses"} 0.0\n',
                }
            },
        }
    }
)
def metrics() -> Response:
    """Prometheus metrics.

    Counters, histograms and gauges of the whole fleet (API, workers, beat), read from Redis at scrape time.
    With METRICS_TOKEN set, only a scrape bearing it is answered.
    """
    ctx = context()
    request_tally.flush(ctx.redis)
    registry = CollectorRegistry(auto_describe=False)
    for collector in (
        RedisCounterCollector(ctx.redis),
        GaugeCollector(ctx.redis),
        ProviderStateCollector(ctx),
        QuotaUsageCollector(ctx.redis),
    ):
        registry.register(collector)
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
