"""`/metrics` after real sends: every family the issue names, with the numbers the pipeline made."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app.api import create_app
from app.api.metrics import token_needed
from app.config import ConfigError, Settings
from app.delivery import dispatch, fairness
from app.delivery.broker import celery_app
from app.enums import Channel, Priority
from app.redis_client import redis_for
from tasks.backlog import measure_backlog
from tasks.deliver import deliver
from tests.conftest import ADMIN_KEY, bearer, email, rerouted
from tests.provider_server import json_response

ADMIN = bearer(ADMIN_KEY)

FAMILIES = {
    "tidings_http_requests": "counter",
    "tidings_http_request_seconds": "histogram",
    "tidings_messages": "counter",
    "tidings_provider_call_seconds": "histogram",
    "tidings_accept_to_provider_seconds": "histogram",
    "tidings_delivery_attempts": "counter",
    "tidings_retries": "counter",
    "tidings_dead_letters": "counter",
    "tidings_sweeper_recovered": "counter",
    "tidings_pacing_postponed": "counter",
    "tidings_pause_postponed": "counter",
    "tidings_provider_pauses": "counter",
    "tidings_provider_paused": "gauge",
    "tidings_provider_breaker_state": "gauge",
    "tidings_queue_depth": "gauge",
    "tidings_pending_messages": "gauge",
    "tidings_oldest_pending_seconds": "gauge",
    "tidings_gauges_measured_at_seconds": "gauge",
}


def scrape(client) -> dict[str, list]:
    body = client.get("/metrics").get_data(as_text=True)
    return {family.name: family for family in text_string_to_metric_families(body)}


def value(family, sample_name: str, **labels: str) -> float:
    return sum(s.value for s in family.samples if s.name == sample_name and labels.items() <= s.labels.items())


def held_message(project, engine, status: str, **columns) -> str:
    """A message put in `status` by hand, with no task for it: the test decides what runs."""
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    message_id = project.send(email(scheduled_at=later)).get_json()["id"]
    assignments = "".join(f", {name} = :{name}" for name in columns)
    with engine.begin() as connection:
        connection.execute(
            text(f"UPDATE messages SET status = :status, scheduled_at = NULL{assignments} WHERE id = :id"),
            {"status": status, "id": message_id, **columns},
        )
    return message_id


@pytest.fixture(autouse=True)
def _resume(client):
    yield
    client.post("/v1/admin/providers/fake/resume", headers=ADMIN)


@pytest.mark.usefixtures("worker")
def test_every_family_is_exposed_after_a_real_send(client, project, engine, fake_provider):
    before = scrape(client)
    sent = project.wait_for(project.send(email()).get_json()["id"])
    assert sent["status"] == "sent"

    ready = {"provider": "fake", "to_address": "ada@example.com"}
    retried = held_message(project, engine, "ready", **ready)
    last_try = held_message(project, engine, "ready", attempts=2, **ready)  # MAX_ATTEMPTS is 3 here
    fake_provider.override = lambda request: json_response({"error": "busy"}, status=503)
    deliver("fake", [retried, last_try])
    fake_provider.override = None
    assert project.get(retried).get_json()["status"] == "retrying"
    assert project.get(last_try).get_json()["status"] == "dead"

    client.post("/v1/admin/providers/fake/pause", json={"seconds": 60}, headers=ADMIN)
    postponed = held_message(project, engine, "ready", **ready)
    deliver("fake", [postponed])
    waiting = held_message(project, engine, "accepted")
    measure_backlog()
    after = scrape(client)

    assert {name: after[name].type for name in FAMILIES} == FAMILIES

    def grew(name: str, sample: str, **labels: str) -> float:
        return value(after[name], sample, **labels) - value(before[name], sample, **labels)

    fake = {"channel": "email", "provider": "fake"}
    assert grew("tidings_messages", "tidings_messages_total", outcome="sent", **fake) >= 1
    assert grew("tidings_messages", "tidings_messages_total", outcome="ready", **fake) >= 1
    assert grew("tidings_retries", "tidings_retries_total", **fake) >= 1
    assert grew("tidings_dead_letters", "tidings_dead_letters_total", **fake) >= 1
    assert grew("tidings_delivery_attempts", "tidings_delivery_attempts_total", **fake) >= 3
    assert grew("tidings_pause_postponed", "tidings_pause_postponed_total", provider="fake") >= 1
    assert grew("tidings_provider_call_seconds", "tidings_provider_call_seconds_count", provider="fake") >= 2
    latency = "tidings_accept_to_provider_seconds"
    assert grew(latency, f"{latency}_count", **fake) >= 1
    assert grew(latency, f"{latency}_bucket", le="+Inf", **fake) == grew(latency, f"{latency}_count", **fake)
    route = {"method": "POST", "route": "/v1/messages"}
    assert grew("tidings_http_requests", "tidings_http_requests_total", status="202", **route) >= 5
    assert grew("tidings_http_request_seconds", "tidings_http_request_seconds_count", **route) >= 5
    assert value(after["tidings_provider_paused"], "tidings_provider_paused", provider="fake") == 1
    assert value(after["tidings_provider_paused"], "tidings_provider_paused", provider="log") == 0
    breaker = after["tidings_provider_breaker_state"]
    assert value(breaker, "tidings_provider_breaker_state", provider="fake", state="closed") == 1
    assert value(breaker, "tidings_provider_breaker_state", provider="fake", state="open") == 0
    depths = {s.labels["queue"] for s in after["tidings_queue_depth"].samples}
    assert {"prepare.transactional", "deliver.fake.transactional", "beat"} <= depths
    lane = {"lane": "prepare.transactional"}
    assert value(after["tidings_pending_messages"], "tidings_pending_messages", **lane) >= 1
    assert value(after["tidings_oldest_pending_seconds"], "tidings_oldest_pending_seconds", **lane) >= 0

    # What this test left waiting would otherwise reach the session's fake provider during a
    # later test: the retry after its backoff (up to 30 s), the postponed one on resume.
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE messages SET status = 'cancelled' WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": [retried, waiting, postponed]},
        )


def backlog_gauges(client, lane: str) -> tuple[float, float, float]:
    """(tasks in the lane's queue, messages pending in the lane, age of its oldest), as
    /metrics shows them once beat's task has measured."""
    measure_backlog()
    scraped = scrape(client)
    return (
        value(scraped["tidings_queue_depth"], "tidings_queue_depth", queue=lane),
        value(scraped["tidings_pending_messages"], "tidings_pending_messages", lane=lane),
        value(scraped["tidings_oldest_pending_seconds"], "tidings_oldest_pending_seconds", lane=lane),
    )


def ready_an_hour_ago(engine, project_id: str, provider: str, count: int) -> list[str]:
    """`count` bulk email messages ready for `provider` since an hour ago, with no task for them yet."""
    with engine.begin() as connection:
        rows = connection.execute(
            text(
                """
                INSERT INTO messages (project_id, channel, status, priority, provider, to_address, created_at)
                SELECT :project, 'email', 'ready', 'bulk', :provider, 'user' || g || '@example.com',
                       now() - interval '1 hour'
                FROM generate_series(1, :count) AS g
                RETURNING id::text
                """
            ),
            {"project": project_id, "provider": provider, "count": count},
        )
        return list(rows.scalars())


def clear_backlog(engine, settings, lane: str, ids: list[str], chunks: int) -> None:
    """The lane's tokens purged, its chunks withdrawn, its messages cancelled: nothing left behind."""
    with celery_app.connection_for_write() as connection:
        connection.default_channel.queue_purge(lane)
    redis = redis_for(settings.redis_url)
    for _ in range(chunks):
        fairness.withdraw(redis, lane, dispatch.CHUNK)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE messages SET status = 'cancelled' WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
        )


def test_a_bulk_backlog_shows_on_metrics_as_tokens_messages_and_age(client, project, engine, settings):
    """A bulk lane's queue holds one token per chunk, not the messages (app/delivery/fairness.py):
    1,200 messages an hour old, published as the pipeline publishes them, are 3 tasks in
    `tidings_queue_depth` and 1,200 in `tidings_pending_messages`. Email goes to postmark for
    the test, a lane no worker consumes, so nothing drains it while it is measured."""
    lane = "deliver.postmark.bulk"
    with rerouted(settings, {Channel.EMAIL: ("postmark",)}):
        tasks_before, pending_before, _ = backlog_gauges(client, lane)
        ids = ready_an_hour_ago(engine, project.id, "postmark", 1200)
        published = dispatch.deliver("postmark", Priority.BULK, ids, project=project.id)
        chunks = sum(len(p.pieces) for p in published)
        try:
            for publishable in published:
                publishable.apply_async()
            tasks, pending, oldest = backlog_gauges(client, lane)
        finally:
            clear_backlog(engine, settings, lane, ids, chunks)
    assert chunks == 3  # postmark's batch of 500
    assert tasks - tasks_before == 3
    assert pending - pending_before == 1200
    assert oldest >= 3600


def test_request_counts_reach_redis_without_a_round_trip_each(client, project):
    """Requests are buffered in the process and flushed by the scrape that reports them."""
    before = scrape(client)["tidings_http_requests"]
    for _ in range(3):
        assert project.call("GET", "/v1/messages").status_code == 200
    assert client.get("/v1/nowhere").status_code == 404
    after = scrape(client)["tidings_http_requests"]
    listed = {"method": "GET", "route": "/v1/messages", "status": "200"}
    assert (
        value(after, "tidings_http_requests_total", **listed) - value(before, "tidings_http_requests_total", **listed)
        == 3
    )
    unmatched = {"route": "<unmatched>", "status": "404"}
    assert value(after, "tidings_http_requests_total", **unmatched) > value(
        before, "tidings_http_requests_total", **unmatched
    )


METRICS_TOKEN = "metrics-token-0123456789"


@pytest.fixture(scope="module")
def guarded(migrated):
    """An API whose /metrics asks for METRICS_TOKEN."""
    return create_app(Settings.from_env({**migrated.environ, "METRICS_TOKEN": METRICS_TOKEN})).test_client()


def test_with_a_metrics_token_a_scrape_must_bring_it(guarded):
    for headers in ({}, bearer("wrong-token-0123456789"), bearer(ADMIN_KEY), {"Authorization": METRICS_TOKEN}):
        refused = guarded.get("/metrics", headers=headers)
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"] == "Bearer"
        assert refused.get_json()["code"] == 401 and "METRICS_TOKEN" in refused.get_json()["message"]
    answer = guarded.get("/metrics", headers=bearer(METRICS_TOKEN))
    assert answer.status_code == 200
    assert "tidings_http_requests" in {family.name for family in text_string_to_metric_families(answer.text)}


def test_a_short_metrics_token_stops_start_up(migrated):
    with pytest.raises(ConfigError, match="METRICS_TOKEN must be at least 16 characters"):
        Settings.from_env({**migrated.environ, "METRICS_TOKEN": "short"})


def test_the_spec_declares_the_metrics_token_only_where_it_is_set(guarded, client):
    """/openapi.json tells the truth for the deployment it comes from."""
    guarded_security = guarded.get("/openapi.json").get_json()["paths"]["/metrics"]["get"]["security"]
    assert guarded_security == [{"metricsToken": []}]
    assert client.get("/openapi.json").get_json()["paths"]["/metrics"]["get"]["security"] == []


@pytest.fixture(scope="module")
def exposed(migrated):
    """An API that listens beyond loopback, with no METRICS_TOKEN set."""
    return create_app(Settings.from_env({**migrated.environ, "TIDINGS_HOST": "0.0.0.0"})).test_client()


def test_beyond_loopback_without_a_token_no_scrape_is_answered(exposed, project):
    """The numbers name every project and its daily volume: none of it leaves without the token."""
    assert project.send(email()).status_code == 202  # the project is in today's quota use now
    for headers in ({}, bearer(ADMIN_KEY), bearer(project.live_key)):
        refused = exposed.get("/metrics", headers=headers)
        assert refused.status_code == 401
        assert "METRICS_TOKEN" in refused.get_json()["message"]
        assert project.id not in refused.get_data(as_text=True)
    assert exposed.get("/openapi.json").get_json()["paths"]["/metrics"]["get"]["security"] == [{"metricsToken": []}]


@pytest.mark.parametrize(
    "scrape_from",
    [
        {"environ_base": {"REMOTE_ADDR": "203.0.113.9"}},
        {"headers": {"X-Forwarded-For": "203.0.113.9"}},
        {"headers": {"Forwarded": "for=203.0.113.9"}},
    ],
    ids=["another-machine", "through-a-proxy", "through-a-proxy-rfc7239"],
)
def test_on_loopback_without_a_token_only_the_machine_itself_is_answered(client, project, scrape_from):
    assert project.send(email()).status_code == 202
    refused = client.get("/metrics", **scrape_from)
    assert refused.status_code == 401
    assert project.id not in refused.get_data(as_text=True)
    answered = client.get("/metrics")
    assert answered.status_code == 200
    assert f'project="{project.id}"' in answered.get_data(as_text=True)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.1.1", True),  # Debian's own name for the host
        ("localhost", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("unix:/run/tidings.sock", False),  # a socket a proxy on any machine may reach
    ],
)
def test_only_a_loopback_bind_keeps_metrics_open_without_a_token(host, loopback, migrated):
    settings = Settings.from_env({**migrated.environ, "TIDINGS_HOST": host})
    assert (settings.loopback_only, token_needed(settings)) == (loopback, not loopback)
