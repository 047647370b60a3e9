"""`/metrics`: Prometheus text for the whole fleet.

The counters workers keep in Redis are read at scrape time, so one scrape of any API
process sees every worker's numbers.
"""

from __future__ import annotations

from flask import Response
from flask_smorest import Blueprint
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from app.api import context
from app.counters import RedisCounterCollector

blp = Blueprint("metrics", __name__, description="Prometheus metrics.")


@blp.route("/metrics")
def metrics() -> Response:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RedisCounterCollector(context().redis))
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
