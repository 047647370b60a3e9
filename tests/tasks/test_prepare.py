"""Prepare on real PostgreSQL with a real worker: every audience rule, and a constant cost per batch."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import event, text

from app.content.rendering import render_version
from app.db import engine_for
from app.delivery import dispatch
from providers.log import LogProvider
from tasks.maintenance import release_due
from tasks.prepare import prepare
from tests.conftest import create_project

pytestmark = pytest.mark.usefixtures("worker")

SETTINGS = {"required_categories": ["security"], "category_defaults": {"marketing": {"sms": False}}}
WELCOME = {
    "key": "welcome",
    "channel": "email",
    "subject": "Hi {{ name }}",
    "text": "Welcome, {{ name }} ({{ subscriber.data.plan }}).",
}


@pytest.fixture
def audience(client):
    """A project with a required category, a category default, a template and subscriber u1."""
    project = create_project(client, settings=SETTINGS)
    assert project.call("POST", "/v1/templates", WELCOME).status_code == 201
    german = {"locale": "de", "subject": "Hallo {{ name }}", "text": "Willkommen, {{ name }}."}
    assert project.call("PUT", "/v1/templates/welcome", german).status_code == 200
    subscriber = {"email": "u1@example.com", "phone": "+4915112345678", "data": {"plan": "pro"}}
    assert project.call("PUT", "/v1/subscribers/u1", subscriber).status_code == 201
    return project


def to_u1(channel: str = "email", **extra) -> dict:
    content = {"subject": "s", "text": "t"} if channel == "email" else {"text": "t"}
    return {"channel": channel, "to": {"subscriber_id": "u1"}, "content": content, **extra}


def with_template(**extra) -> dict:
    return {"channel": "email", "to": {"subscriber_id": "u1"}, "template": "welcome", **extra}


def stored_content(engine, message_id: str) -> tuple:
    """What prepare wrote for deliver to send: subject, text, html."""
    with engine.connect() as connection:
        return tuple(
            connection.execute(
                text("SELECT subject, text, html FROM message_contents WHERE message_id = :id"),
                {"id": message_id},
            ).one()
        )


def make_due(engine, message_id: str) -> None:
    """As if the time a scheduled message waits for had come."""
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET scheduled_at = now() - interval '1 second', "
                "next_attempt_at = now() - interval '1 second' WHERE id = :id"
            ),
            {"id": message_id},
        )


def test_an_opted_out_category_is_skipped(audience, fake_provider):
    audience.call("PUT", "/v1/subscribers/u1/preferences", {"categories": {"marketing": {"email": False}}})
    message = audience.wait_for(audience.send(to_u1(category="marketing")).get_json()["id"])
    assert message["status"] == "skipped"
    assert message["events"][-1]["type"] == "skipped"
    assert message["events"][-1]["data"] == {
        "reason": "preference",
        "preference": "categories.marketing.email",
    }
    assert fake_provider.count(message["id"]) == 0
    other = audience.wait_for(audience.send(to_u1(category="news")).get_json()["id"])
    assert other["status"] == "sent", "only the category turned off is skipped"


def test_a_channel_switched_off_skips_every_category_but_required_ones(audience):
    audience.call("PUT", "/v1/subscribers/u1/preferences", {"channels": {"sms": False}})
    skipped = audience.wait_for(audience.send(to_u1("sms", category="news")).get_json()["id"])
    assert (skipped["status"], skipped["events"][-1]["data"]["preference"]) == ("skipped", "channels.sms")
    required = audience.wait_for(audience.send(to_u1("sms", category="security")).get_json()["id"])
    assert required["status"] == "sent"
    assert required["id"] in {outbound.message_id for outbound in LogProvider.record}


def test_a_required_category_is_delivered_despite_an_opt_out(audience, fake_provider):
    audience.call(
        "PUT",
        "/v1/subscribers/u1/preferences",
        {"channels": {"email": False}, "categories": {"security": {"email": False}}},
    )
    message = audience.wait_for(audience.send(to_u1(category="security")).get_json()["id"])
    assert message["status"] == "sent"
    assert fake_provider.count(message["id"]) == 1


def test_a_project_category_default_applies_until_the_subscriber_says_otherwise(audience):
    skipped = audience.wait_for(audience.send(to_u1("sms", category="marketing")).get_json()["id"])
    assert skipped["status"] == "skipped"
    assert skipped["events"][-1]["data"]["preference"] == "project default categories.marketing.sms"
    audience.call("PUT", "/v1/subscribers/u1/preferences", {"categories": {"marketing": {"sms": True}}})
    assert audience.wait_for(audience.send(to_u1("sms", category="marketing")).get_json()["id"])["status"] == "sent"


def test_a_suppressed_address_never_reaches_the_provider(audience, engine):
    audience.call("POST", "/v1/suppressions", {"channel": "sms", "address": "+4915112345678", "reason": "complaint"})
    with engine.begin() as connection:  # written around the API, in another case than the suppression
        connection.execute(
            text("INSERT INTO subscribers (project_id, external_id, email) VALUES (:p, 'u2', ' U2@Example.com')"),
            {"p": audience.id},
        )
    audience.call("POST", "/v1/suppressions", {"channel": "email", "address": "u2@example.com", "reason": "bounce"})
    by_subscriber = audience.send(to_u1("sms", category="security")).get_json()["id"]
    by_address = audience.send({**to_u1("sms"), "to": {"phone": "+4915112345678"}}).get_json()["id"]
    by_email = audience.send({**to_u1(), "to": {"subscriber_id": "u2"}}).get_json()["id"]
    for message_id, reason in ((by_subscriber, "complaint"), (by_address, "complaint"), (by_email, "bounce")):
        message = audience.wait_for(message_id)
        assert message["status"] == "suppressed"
        assert message["events"][-1] == {
            **message["events"][-1],
            "type": "suppressed",
            "data": {"reason": reason},
        }
    assert not {by_subscriber, by_address, by_email} & {outbound.message_id for outbound in LogProvider.record}


def test_an_expired_suppression_no_longer_blocks(audience):
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    audience.call("POST", "/v1/suppressions", {"channel": "sms", "address": "+4915112345678", "expires_at": past})
    assert audience.wait_for(audience.send(to_u1("sms")).get_json()["id"])["status"] == "sent"


def quiet_hours_around_now(zone: str) -> tuple[dict, datetime]:
    """A window from an hour ago to an hour ahead in `zone`, and when it ends (to the minute)."""
    local = datetime.now(ZoneInfo(zone))
    start, end = local - timedelta(hours=1), local + timedelta(hours=1)
    window = {"start": start.strftime("%H:%M"), "end": end.strftime("%H:%M")}
    return window, end.replace(second=0, microsecond=0)


def test_quiet_hours_hold_a_message_until_the_window_ends_then_release_it(audience, engine, fake_provider):
    window, ends = quiet_hours_around_now("Asia/Tokyo")
    audience.call("PUT", "/v1/subscribers/u1", {"email": "u1@example.com", "timezone": "Asia/Tokyo"})
    audience.call("PUT", "/v1/subscribers/u1/preferences", {"quiet_hours": window})
    message_id = audience.send(to_u1(category="news")).get_json()["id"]
    held = audience.wait_for(message_id, {"scheduled"})
    assert held["status"] == "scheduled"
    assert datetime.fromisoformat(held["scheduled_at"]) == ends
    assert held["events"][-1]["type"] == "scheduled"
    assert held["events"][-1]["data"] == {"reason": "quiet_hours", "until": ends.astimezone(UTC).isoformat()}
    assert fake_provider.count(message_id) == 0

    release_due()  # not yet due: stays held
    assert audience.get(message_id).get_json()["status"] == "scheduled"
    # The window has passed: the subscriber's clock is now outside it and the hold is due.
    passed = {
        "start": (ends + timedelta(hours=1)).strftime("%H:%M"),
        "end": (ends + timedelta(hours=2)).strftime("%H:%M"),
    }
    audience.call("PUT", "/v1/subscribers/u1/preferences", {"quiet_hours": passed})
    make_due(engine, message_id)
    release_due()
    sent = audience.wait_for(message_id)
    assert sent["status"] == "sent"
    assert fake_provider.count(message_id) == 1


def test_a_quiet_hours_hold_does_not_change_what_the_send_answered(audience):
    window, _ = quiet_hours_around_now("UTC")
    audience.call("PUT", "/v1/subscribers/u1/preferences", {"quiet_hours": window})
    first = audience.send(to_u1(category="news"), **{"Idempotency-Key": "held-1"})
    held = audience.wait_for(first.get_json()["id"], {"scheduled"})
    assert held["status"] == "scheduled"
    assert held["events"][0]["type"] == "accepted"
    replay = audience.send(to_u1(category="news"), **{"Idempotency-Key": "held-1"})
    assert replay.get_json() == first.get_json()
    assert replay.get_json()["status"] == "accepted"


def test_project_default_quiet_hours_apply_to_subscribers_without_their_own(client):
    window, ends = quiet_hours_around_now("UTC")
    project = create_project(client, settings={"quiet_hours": window})
    project.call("PUT", "/v1/subscribers/u1", {"phone": "+4915112345678"})
    message = project.wait_for(project.send(to_u1("sms")).get_json()["id"], {"scheduled"})
    assert (message["status"], datetime.fromisoformat(message["scheduled_at"])) == ("scheduled", ends)


def test_required_categories_and_bypass_go_at_once_inside_quiet_hours(audience):
    window, _ = quiet_hours_around_now("UTC")
    audience.call("PUT", "/v1/subscribers/u1/preferences", {"quiet_hours": window})
    required = audience.send(to_u1(category="security")).get_json()["id"]
    bypass = audience.send(to_u1(bypass_quiet_hours=True)).get_json()["id"]
    assert audience.wait_for(required)["status"] == "sent"
    assert audience.wait_for(bypass)["status"] == "sent"


def test_a_message_is_rendered_with_the_version_it_was_accepted_with(audience, engine, fake_provider):
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    message_id = audience.send(with_template(data={"name": "Ada"}, scheduled_at=later)).get_json()["id"]
    audience.call("PUT", "/v1/templates/welcome", {"subject": "Changed {{ name }}", "text": "t"})
    make_due(engine, message_id)
    release_due()
    message = audience.wait_for(message_id)
    assert (message["status"], message["template"], message["template_version"]) == ("sent", "welcome", 2)
    (outbound,) = [m for m in fake_provider.delivered() if m.message_id == message_id]
    assert outbound.subject == "Hi Ada"
    assert stored_content(engine, message_id) == ("Hi Ada", "Welcome, Ada (pro).", None)


@pytest.mark.parametrize(
    ("subscriber_locale", "message_locale", "subject"),
    [("de-AT", None, "Hallo Ada"), ("fr", None, "Hi Ada"), (None, "de", "Hallo Ada"), ("de", "en", "Hi Ada")],
)
def test_the_locale_falls_back_from_message_to_subscriber_to_default(
    audience, fake_provider, subscriber_locale, message_locale, subject
):
    audience.call(
        "PUT",
        "/v1/subscribers/u1",
        {"email": "u1@example.com", "locale": subscriber_locale, "data": {"plan": "x"}},
    )
    body = with_template(data={"name": "Ada"}, **({"locale": message_locale} if message_locale else {}))
    message = audience.wait_for(audience.send(body).get_json()["id"])
    assert message["status"] == "sent"
    (outbound,) = [m for m in fake_provider.delivered() if m.message_id == message["id"]]
    assert outbound.subject == subject


def test_a_missing_variable_fails_the_message_and_never_sends_a_blank(audience, fake_provider):
    message = audience.wait_for(audience.send(with_template(data={})).get_json()["id"])
    assert message["status"] == "failed"
    assert message["error"] == "render error in subject: 'name' is undefined"
    assert message["events"][-1] == {**message["events"][-1], "type": "failed"}
    assert message["events"][-1]["data"] == {"reason": "render error in subject: 'name' is undefined"}
    assert fake_provider.count(message["id"]) == 0


def test_a_template_that_breaks_the_sandbox_at_send_fails(audience, fake_provider):
    audience.call(
        "POST",
        "/v1/templates",
        {"key": "evil", "channel": "email", "subject": "s", "text": "{{ x|attr(a) }}"},
    )
    body = {
        "channel": "email",
        "to": {"subscriber_id": "u1"},
        "template": "evil",
        "data": {"x": 1, "a": "__class__"},
    }
    message = audience.wait_for(audience.send(body).get_json()["id"])
    assert message["status"] == "failed"
    assert message["error"].startswith("render error in text: not allowed: access to attribute '__class__'")
    assert fake_provider.count(message["id"]) == 0


@contextmanager
def statements_in_this_thread(database_url: str) -> Iterator[list[str]]:
    """The SQL this thread sends on the pipeline's engine (the worker's threads share it)."""
    seen: list[str] = []
    me = threading.get_ident()

    def record(conn, cursor, statement, *_):
        if threading.get_ident() == me:
            seen.append(statement)

    engine = engine_for(database_url)
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def accepted_messages(engine, project_id: str, kinds: list[str]) -> list[str]:
    """Accepted templated messages written around the API (so no task picks them up), one per kind:
    `ready`, `skipped` (opted out), `suppressed`, `held` (quiet hours) or `failed` (no name)."""
    with engine.begin() as connection:
        return (
            connection.execute(
                text(
                    """
                WITH m AS (
                    INSERT INTO messages (project_id, channel, status, priority, category, subscriber_id,
                                          test, template, template_version)
                    SELECT :p, 'email', 'accepted', 'bulk',
                           CASE WHEN k.kind = 'skipped' THEN 'marketing' ELSE 'news' END,
                           k.kind || '-' || k.n, true, 'welcome', 2
                    FROM unnest(CAST(:kinds AS text[])) WITH ORDINALITY AS k(kind, n)
                    RETURNING id, subscriber_id)
                INSERT INTO message_contents (message_id, data)
                SELECT id, CASE WHEN subscriber_id LIKE 'failed-%' THEN '{}'::jsonb
                                ELSE jsonb_build_object('name', subscriber_id) END FROM m
                RETURNING message_id::text
                """
                ),
                {"p": project_id, "kinds": kinds},
            )
            .scalars()
            .all()
        )


def subscribers_for(project, kinds: list[str]) -> None:
    window, _ = quiet_hours_around_now("UTC")
    rows = []
    for n, kind in enumerate(kinds, start=1):
        external_id = f"{kind}-{n}"
        rows.append(
            {
                "external_id": external_id,
                "email": f"{external_id}@example.com",
                "locale": ("de", "en", "fr")[n % 3],
                "data": {"plan": "pro"},
            }
        )
    assert project.call("POST", "/v1/subscribers/import", {"subscribers": rows}).get_json()["rejected"] == []
    for row, kind in zip(rows, kinds, strict=True):
        if kind == "skipped":
            prefs = {"categories": {"marketing": {"email": False}}}
        elif kind == "held":
            prefs = {"quiet_hours": window}
        else:
            continue
        project.call("PUT", f"/v1/subscribers/{row['external_id']}/preferences", prefs)
    suppressed = [
        f"{row['external_id']}@example.com" for row, kind in zip(rows, kinds, strict=True) if kind == "suppressed"
    ]
    for address in suppressed:
        project.call("POST", "/v1/suppressions", {"channel": "email", "address": address})


def prepared(audience, engine, settings, kinds: list[str]) -> tuple[int, float, list[str]]:
    subscribers_for(audience, kinds)
    ids = accepted_messages(engine, audience.id, kinds)
    with statements_in_this_thread(settings.database_url) as seen:
        started = time.perf_counter()
        prepare(ids)
        elapsed = time.perf_counter() - started
    return len(seen), elapsed, ids


def statuses(engine, ids: list[str]) -> dict[str, int]:
    """How prepare decided: `ready` for every message it passed on (the worker may have sent it since)."""
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT CASE WHEN ready_at IS NULL THEN status ELSE 'ready' END AS outcome, count(*) "
                "FROM messages WHERE id = ANY(CAST(:ids AS uuid[])) GROUP BY outcome"
            ),
            {"ids": ids},
        ).all()
    return dict(rows)


def test_prepare_costs_the_same_statements_for_1_and_500_messages(client, engine, app):
    settings = app.extensions["tidings"].settings
    one, _, ids = prepared(audience_project(client), engine, settings, ["ready"])
    assert statuses(engine, ids) == {"ready": 1}
    many, elapsed, ids = prepared(audience_project(client), engine, settings, ["ready"] * 500)
    assert statuses(engine, ids) == {"ready": 500}
    assert one == many

    mixed_kinds = ["ready", "skipped", "suppressed", "held", "failed"]
    few, _, ids = prepared(audience_project(client), engine, settings, mixed_kinds)
    assert statuses(engine, ids) == {"ready": 1, "skipped": 1, "suppressed": 1, "scheduled": 1, "failed": 1}
    lots, mixed_elapsed, ids = prepared(audience_project(client), engine, settings, mixed_kinds * 100)
    assert statuses(engine, ids) == {
        "ready": 100,
        "skipped": 100,
        "suppressed": 100,
        "scheduled": 100,
        "failed": 100,
    }
    assert few == lots
    print(
        f"\nprepare: {one} statements for 1 ready message, {many} for 500; "
        f"{few} for one of each outcome, {lots} for 100 of each; "
        f"500 ready in {elapsed * 1000:.0f} ms, 500 mixed in {mixed_elapsed * 1000:.0f} ms"
    )


def audience_project(client):
    """A fresh project like the `audience` fixture's, for tests that need several."""
    project = create_project(client, settings=SETTINGS)
    project.call("POST", "/v1/templates", WELCOME)
    project.call(
        "PUT",
        "/v1/templates/welcome",
        {"locale": "de", "subject": "Hallo {{ name }}", "text": "Willkommen, {{ name }}."},
    )
    return project


def test_render_time_per_message_over_500(audience, engine):
    """Prints the cost of rendering alone (compiled templates cached), for the report; asserts the words."""
    with engine.connect() as connection:
        version = connection.execute(
            text("SELECT * FROM templates WHERE project_id = :p AND key = 'welcome' AND version = 2"),
            {"p": audience.id},
        ).one()
    contexts = [{"name": f"n{i}", "subscriber": {"data": {"plan": "pro"}}} for i in range(500)]
    locales = [[("de", "en", "fr")[i % 3]] for i in range(500)]
    started = time.perf_counter()
    rendered = [render_version(version, wanted, context) for wanted, context in zip(locales, contexts, strict=True)]
    elapsed = time.perf_counter() - started
    assert rendered[0] == ("de", {"subject": "Hallo n0", "text": "Willkommen, n0."})
    assert rendered[1] == ("en", {"subject": "Hi n1", "text": "Welcome, n1 (pro)."})
    print(f"\nrender: {elapsed / 500 * 1e6:.0f} µs per message over 500 (email subject + text, 2 locales)")


def test_a_stored_address_that_is_no_string_fails_its_message_alone(client, engine, fake_provider):
    """A subscriber row written past the API's checks (`data.webhook_url` 1) fails its own
    message with a reason, and another project's message in the same prepare batch is sent."""
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    hooks, other = create_project(client), create_project(client)
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO subscribers (project_id, external_id, data) VALUES (:p, 'u1', '{\"webhook_url\": 1}')"),
            {"p": hooks.id},
        )
    to_hook = {"channel": "webhook", "to": {"subscriber_id": "u1"}, "content": {"text": "t"}, "scheduled_at": later}
    bad = hooks.send(to_hook).get_json()["id"]
    to_email = {"channel": "email", "to": {"email": "ada@example.com"}, "content": {"subject": "s", "text": "t"}}
    good = other.send({**to_email, "scheduled_at": later}).get_json()["id"]
    with engine.begin() as connection:  # both accepted, to be prepared by one task
        connection.execute(
            text(
                "UPDATE messages SET status = 'accepted', scheduled_at = NULL, next_attempt_at = NULL "
                "WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": [bad, good]},
        )
    prepare([bad, good])
    assert other.wait_for(good)["status"] == "sent"
    failed = hooks.get(bad).get_json()
    reason = "subscriber 'u1' has no webhook address"
    assert (failed["status"], failed["error"], failed["events"][-1]["data"]) == ("failed", reason, {"reason": reason})
    assert [receipt.message_id for receipt in fake_provider.receipts if receipt.message_id in {bad, good}] == [good]


def accepted_raw(engine, project_id: str, template: str, datas: list[dict]) -> list[str]:
    """Accepted live messages of one template to raw addresses, written around the API so
    that a test dispatches their prepare task itself."""
    with engine.begin() as connection:
        return [
            connection.execute(
                text(
                    """
                WITH m AS (
                    INSERT INTO messages (project_id, channel, status, priority, to_address, template, template_version)
                    VALUES (:p, 'email', 'accepted', 'bulk', 'ada@example.com', :t, 1) RETURNING id)
                INSERT INTO message_contents (message_id, data)
                SELECT id, CAST(:data AS jsonb) FROM m RETURNING message_id::text
                """
                ),
                {"p": project_id, "t": template, "data": json.dumps(data)},
            ).scalar_one()
            for data in datas
        ]


def test_a_template_bomb_fails_only_its_own_message_in_a_shared_batch(client, engine, fake_provider):
    bomber, neighbour = create_project(client), create_project(client)
    bomb = {"key": "bomb", "channel": "email", "subject": "s", "text": "{{ ((x ** 1000) ** 1000) ** 30 > 0 }}"}
    assert bomber.call("POST", "/v1/templates", bomb).status_code == 201  # x is data: not visible at save
    assert neighbour.call("POST", "/v1/templates", WELCOME).status_code == 201
    (bombed,) = accepted_raw(engine, bomber.id, "bomb", [{"x": 10}])
    good = accepted_raw(
        engine, neighbour.id, "welcome", [{"name": f"n{i}", "subscriber": {"data": {"plan": "pro"}}} for i in range(3)]
    )
    (task,) = dispatch.prepare([good[0], bombed, *good[1:]], "bulk")
    task.apply_async()

    failed = bomber.wait_for(bombed)
    assert failed["status"] == "failed"
    assert failed["error"] == (
        "render error in text: not allowed: the template makes an integer of more than 4096 bits (a power too large)"
    )
    assert [neighbour.wait_for(message_id)["status"] for message_id in good] == ["sent"] * 3
    assert [fake_provider.count(message_id) for message_id in [bombed, *good]] == [0, 1, 1, 1]
