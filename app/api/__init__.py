"""The Flask application: blueprints, error shape, and what every request shares."""

from __future__ import annotations

from flask import Flask

from app import console
from app.access.caller_cache import CallerCache
from app.access.ratelimit import ApiRateLimiter
from app.api import contract
from app.api.body_budget import BodyBudget
from app.api.context import Context
from app.config import Settings
from app.db import session_factory
from app.delivery import broker
from app.errors import TidingsApi, install
from app.observability.streams import Hub
from app.redis_client import redis_for

MAX_BODY_BYTES = 1024 * 1024


def create_app(settings: Settings) -> Flask:
    from app.api import (
        admin,
        batches,
        docs,
        events,
        health,
        inbound,
        inbox,
        messages,
        metrics,
        preference_page,
        public,
        requests,
        subscribers,
        suppressions,
        templates,
        topics,
        url_checks,
        webhooks,
        workflows,
    )

    broker.configure(settings)
    app = Flask("tidings")
    app.config.update(
        API_TITLE="Tidings",
        API_VERSION="v1",
        OPENAPI_VERSION="3.1.0",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
        API_SPEC_OPTIONS={"tags": contract.TAGS},
        MAX_CONTENT_LENGTH=MAX_BODY_BYTES,
    )
    client = redis_for(settings.redis_url)
    hub = Hub(settings.redis_url, max_listeners=max(settings.api_threads - 4, 1))
    db = session_factory(settings.database_url)
    bodies = BodyBudget(settings.large_body_budget_mib * 1024 * 1024)
    app.extensions["tidings"] = Context(
        settings, db, client, ApiRateLimiter(client), hub, CallerCache(db, client), bodies
    )
    api = TidingsApi(app)
    contract.register(api.spec)
    install(app, api)
    requests.install(app)
    url_checks.install(app)
    app.register_blueprint(docs.blp)
    for blueprint in (
        health.blp,
        metrics.blp,
        admin.blp,
        inbound.blp,
        messages.blp,
        batches.blp,
        subscribers.blp,
        suppressions.blp,
        templates.blp,
        topics.blp,
        workflows.blp,
        events.blp,
        webhooks.blp,
        inbox.blp,
        public.blp,
        preference_page.blp,
    ):
        api.register_blueprint(blueprint)
    console.install(app)
    return app
