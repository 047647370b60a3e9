"""`/metrics`: Prometheus text for the whole fleet.

Nothing here is per process: workers add their counts and histograms to Redis
(app/observability/counters.py), beat stores the backlog gauges (app/observability/gauges.py), provider pause and
breaker state is read where the workers keep it, and daily quota use where the API counts it
(app/observability/quota_usage.py). So one scrape of any API process sees every worker on
every machine, however many prefork children or autoscaled workers came and went.

The numbers name every project and its daily volume, so a scrape must bring METRICS_TOKEN
as a bearer token. Without one set, only a scrape from this machine to an API that listens
on loopback alone is answered (`make run`), and not one a reverse proxy forwarded: a
proxy on the same machine makes the internet's requests come from loopback too.
"""

from __future__ import annotations

from collections.abc import Iterator

from flask import Response, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from app.access.auth import bearer_is, unauthorized
from app.api.blueprint import Blueprint
from app.api.context import Context, context
from app.api.contract import METRICS_TOKEN, OPERATIONS, Access
from app.api.requests import request_tally
from app.config import Settings, is_loopback
from app.observability.counters import RedisCounterCollector
from app.observability.gauges import GaugeCollector
from app.observability.quota_usage import QuotaUsageCollector
from app.services.operations import BREAKER_STATES, provider_states

# Headers a reverse proxy adds to what it forwards.
FORWARDED = ("Forwarded", "X-Forwarded-For", "X-Real-IP")


def require_metrics_token() -> None:
    """Refuse a scrape without METRICS_TOKEN, unless none is set and the scrape is this machine's own."""
    settings = context().settings
    if settings.metrics_token is not None:
        if not bearer_is(settings.metrics_token):
            unauthorized("/metrics needs the metrics token (METRICS_TOKEN) as a bearer token.")
    elif not (settings.loopback_only and _from_this_machine()):
        unauthorized(
            f"/metrics answers only this machine while METRICS_TOKEN is not set, and the API listens on "
            f"{settings.host}: set METRICS_TOKEN and scrape with it as a bearer token."
        )


def _from_this_machine() -> bool:
    return is_loopback(request.remote_addr) and not any(name in request.headers for name in FORWARDED)


def token_needed(settings: Settings) -> bool:
    """Whether the spec declares the token: always, but for an API on loopback alone without one."""
    return settings.metrics_token is not None or not settings.loopback_only


blp = Blueprint(
    "metrics",
    __name__,
    access=Access((METRICS_TOKEN,), require_metrics_token, needed=token_needed),
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
    Only a scrape bearing METRICS_TOKEN is answered; without one set, only a scrape from the machine
    itself to an API listening on loopback alone.
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
