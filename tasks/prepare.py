"""Prepare: decide who gets each accepted message and in which words, then route it.

For a batch of up to 500 ids, a fixed number of statements whatever the batch size
(app/delivery/prepare_store.py): load messages with subscribers, preferences and project
settings; load the pinned template versions; load matching suppressions; then in memory,
per message, in this order:

1. no address for the channel        → failed
2. address suppressed                 → suppressed (required categories too: the address
                                        bounced, complained or asked not to be contacted);
                                        a push to a subscriber goes to each of its tokens
                                        not suppressed, and is suppressed when all are
                                        (tasks/devices.py)
3. a preference turns it off          → skipped (never for a required category)
4. inside the subscriber's quiet hours → scheduled until the window ends (not for
                                        required categories nor `bypass_quiet_hours`)
5. the template does not render       → failed (a missing variable is never a blank)
6. in-app                             → sent: stored in the subscriber's inbox, no provider
7. otherwise                          → ready, and on to its deliver lane: the simulator for
                                        a simulated recipient, `log` for a test key, else the
                                        first provider of its channel whose circuit is not
                                        open (one Redis read per batch, tasks/routing.py);
                                        emails gain open and click tracking and
                                        List-Unsubscribe as their project and template say
                                        (app.content.tracking).

Rendering comes last so that messages that will not go are never rendered.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from celery import Task
from celery.canvas import Signature
from sqlalchemy import Row
from sqlalchemy.orm import Session

from app.config import Settings, current_settings
from app.content.addresses import normalise_address
from app.content.rendering import RenderError, as_content, mentions, render_version
from app.content.tokens import LINK_LIFETIME
from app.content.tracking import extras_for, preferences_url, tracked_html, unsubscribe_headers
from app.db import enqueue_after_commit, publish, session_scope
from app.delivery import device_store, dispatch, fairness, fanout, prepare_store, store
from app.delivery.breaker import CircuitBreakers
from app.delivery.broker import celery_app
from app.delivery.policy import ProjectRules, held_until, opted_out
from app.delivery.prepare_store import Plan, Rendered
from app.delivery.queues import prepare_queue
from app.enums import Channel, EventType, MessageStatus, Priority
from app.redis_client import redis_for
from tasks import devices, instrument, isolation, reconnect, routing


@celery_app.task(name="tidings.prepare", bind=True)
def prepare(self: Task, ids: list[str], priority: str = Priority.TRANSACTIONAL) -> None:
    """Decide every accepted message of the batch and hand the sendable ones to deliver; a
    message the batch cannot handle fails alone (tasks/isolation.py), and a lost connection
    runs the task again within seconds (tasks/reconnect.py)."""
    with reconnect.again_on_lost_connection(self):
        prepare_chunk(current_settings(), ids, priority)


@celery_app.task(name="tidings.prepare_next", bind=True)
def prepare_next(self: Task, priority: str = Priority.BULK) -> None:
    """Prepare the ids whose projects' turn it is (app/delivery/fairness.py); ids taken
    whose run loses a connection go again as a prepare task of their own."""
    config = current_settings()
    with reconnect.again_on_lost_connection(self):
        taken = fairness.withdraw(redis_for(config.redis_url), prepare_queue(priority), dispatch.CHUNK)
    ids = list(fairness.owners(taken))

    def again(wait: float) -> bool:
        for signature in dispatch.prepare(ids, priority):
            publish(cast(Signature, signature).set(countdown=wait))  # no project: plain signatures
        return bool(ids)

    with reconnect.again_on_lost_connection(self, again):
        prepare_chunk(config, ids, priority)


def prepare_chunk(config: Settings, ids: list[str], priority: str) -> None:
    """One chunk, however it came, through the door (tasks/isolation.py): a run that died
    before splits it, a message that kills its worker is failed, one that raises fails alone."""

    def one_per_task(part: Sequence[str]) -> None:
        for signature in dispatch.prepare(part, priority, size=1):
            publish(signature)

    fail = isolation.fail_message(config, "prepare", MessageStatus.ACCEPTED)
    with isolation.batch("prepare", ids, config=config, redispatch=one_per_task, fail_alone=fail) as run:
        run.in_halves(lambda part: prepare_batch(config, part))


def prepare_batch(config: Settings, ids: Sequence[str]) -> list[str]:
    """One transaction over the batch: a fixed number of statements whatever its size. The
    ids it took: rows another run holds, or no longer accepted, are not among them."""
    with session_scope(config.database_url) as session:
        rows = prepare_store.load(session, ids)
        if not rows:
            return []
        circuits = CircuitBreakers(redis_for(config.redis_url), config.breaker).states(routing.fallible(config.chains))
        routes = routing.choose(config.chains, circuits)
        addresses = {row.id: resolve_address(row) for row in rows}
        tokens = {row.id: found for row in rows if (found := devices.tokens_of(row))}  # push to every device
        suppressed = prepare_store.active_suppressions(
            session,
            {(row.project_id, row.channel, address) for row in rows if (address := addresses[row.id])}
            | {(row.project_id, row.channel, token) for row in rows for token in tokens.get(row.id, ())},
        )
        addresses.update(devices.addresses(rows, tokens, suppressed))
        versions = {
            (t.project_id, t.key, t.version): t
            for t in prepare_store.template_versions(
                session, {(r.project_id, r.template, r.template_version) for r in rows if r.template}
            )
        }
        plan = Plan()
        projects = {row.id: row.project_id for row in rows}
        rules: dict[str, ProjectRules] = {}
        for row in rows:
            project_rules = rules.setdefault(row.project_id, ProjectRules.from_settings(row.project_settings))
            decide(row, addresses[row.id], suppressed, versions, project_rules, plan, routes, config.public_url)
        add_email_extras(session, plan, {row.id: row for row in rows}, versions, config.public_url)
        prepare_store.write_content(session, plan.rendered)
        prepare_store.close(session, plan.closed)
        prepare_store.hold(session, plan.held)
        prepare_store.mark_ready(
            session, [r[0] for r in plan.ready], [r[1] for r in plan.ready], [r[3] for r in plan.ready]
        )
        device_store.start(session, devices.new_devices([r[0] for r in plan.ready], projects, tokens, suppressed))
        store.record_events(session, plan.events)
        fanout.announce(session, prepare_store.to_inbox(session, plan.inbox))
        ready = [
            (message_id, provider, priority, projects[message_id]) for message_id, provider, priority, _ in plan.ready
        ]
        for task in dispatch.deliver_by_lane(ready):
            enqueue_after_commit(session, task)
    instrument.prepared(redis_for(config.redis_url), rows, plan)
    return [row.id for row in rows]


def decide(
    row: Row,
    address: str | None,
    suppressed: Mapping[tuple[str, str, str], str],
    versions: Mapping[tuple[str, str, int], Row],
    rules: ProjectRules,
    plan: Plan,
    routes: Mapping[Channel, str],
    public_url: str,
) -> None:
    """One message's fate, added to the plan (the order is the module docstring's)."""
    if address is None:
        reason: str | None = f"subscriber {row.subscriber_id!r} has no {row.channel} address"
        return plan.close(row, MessageStatus.FAILED, EventType.FAILED, {"reason": reason})
    reason = suppressed.get((row.project_id, row.channel, address))
    if reason is not None:
        return plan.close(row, MessageStatus.SUPPRESSED, EventType.SUPPRESSED, {"reason": reason})
    if row.has_subscriber:
        preferences = row.preferences or {}
        rule = opted_out(preferences, rules, row.category, row.channel)
        if rule is not None:
            data = {"reason": "preference", "preference": rule}
            return plan.close(row, MessageStatus.SKIPPED, EventType.SKIPPED, data)
        until = held_until(preferences, rules, row.category, row.bypass_quiet_hours, row.timezone, row.now)
        if until is not None:
            plan.held.append((row.id, until))
            data = {"reason": "quiet_hours", "until": until.isoformat()}
            plan.events.append(store.NewEvent(row.id, row.project_id, EventType.SCHEDULED, data))
            return None
    if row.template:
        try:
            template = versions[(row.project_id, row.template, row.template_version)]
            plan.rendered.append(render(row, template, public_url))
        except RenderError as error:
            data = {"reason": f"render error in {error.field}: {error.detail}"}
            return plan.close(row, MessageStatus.FAILED, EventType.FAILED, data)
    if row.channel == Channel.IN_APP:
        plan.inbox.append((row.id, address))
        return None
    provider = routing.provider_for(Channel(row.channel), address, row.test, routes)
    plan.ready.append((row.id, provider, row.priority, address))
    return None


def render(row: Row, template: Row, public_url: str) -> Rendered:
    """Render the pinned version in the message's, else the subscriber's, else the default locale.

    A message to a subscriber has `subscriber` and, where the template prints it,
    `preferences_url`: a link to that subscriber's preference page, lasting as long as the
    other links a message carries. Data the sender gave under either name wins.
    """
    context: dict[str, Any] = dict(row.message_data or {})
    if row.has_subscriber:
        if mentions(template, "preferences_url"):
            expires_at = int(time.time() + LINK_LIFETIME)
            link = preferences_url(public_url, row.project_id, row.subscriber_id, row.subscriber_created_at, expires_at)
            context.setdefault("preferences_url", link)
        context.setdefault(
            "subscriber",
            {
                "id": row.subscriber_id,
                "email": row.email,
                "phone": row.phone,
                "locale": row.subscriber_locale,
                "timezone": row.timezone,
                "data": row.subscriber_data or {},
            },
        )
    _, rendered = render_version(template, [row.message_locale, row.subscriber_locale], context)
    return Rendered(row.id, **as_content(Channel(template.channel), rendered))


def resolve_address(row: Row) -> str | None:
    """The message's own address, else its subscriber's for the channel; normalised.

    A value that is no string (`data.webhook_url` is the subscriber's own JSON, and rows
    written before the API checked it may hold anything) is no address: that message fails
    with its reason, and the rest of the batch goes on.
    """
    address = row.to_address or subscriber_address(row)
    return normalise_address(row.channel, address) if isinstance(address, str) and address.strip() else None


def subscriber_address(row: Row) -> Any:
    """The address a subscriber has for the message's channel, if any, as stored."""
    if not row.has_subscriber:
        return None
    match row.channel:
        case Channel.EMAIL:
            return row.email
        case Channel.SMS:
            return row.phone
        case Channel.PUSH:
            return next(iter(devices.tokens_of(row)), None)  # the first; tasks/devices.py sends to each
        case Channel.WEBHOOK:
            return (row.subscriber_data or {}).get("webhook_url")
        case Channel.IN_APP:
            return row.subscriber_id  # the inbox is the subscriber's own
    return None


def add_email_extras(
    session: Session, plan: Plan, rows: Mapping[str, Row], versions: Mapping[tuple[str, str, int], Row], public_url: str
) -> None:
    """Tracking and List-Unsubscribe for the batch's ready emails, as their project and
    template say. Inline html is read only for the messages tracking rewrites."""
    wanted = []
    for message_id, _, _, address in plan.ready:
        row = rows[message_id]
        if row.channel != Channel.EMAIL:
            continue
        template = versions.get((row.project_id, row.template, row.template_version)) if row.template else None
        extras = extras_for(row.project_settings, template.tracking if template else None, row.priority, row.category)
        if extras:
            wanted.append((row, address, extras))
    rendered = {r.message_id: r for r in plan.rendered}
    inline = prepare_store.inline_html(
        session, [row.id for row, _, extras in wanted if (extras.opens or extras.clicks) and row.id not in rendered]
    )
    for row, address, extras in wanted:
        base = rendered.get(row.id) or Rendered(row.id)
        html = base.html if row.id in rendered else inline.get(row.id)
        if html and (extras.opens or extras.clicks):
            html = tracked_html(html, public_url, row.project_id, row.id, extras)
        headers = None
        if extras.unsubscribe:
            headers = unsubscribe_headers(public_url, row.project_id, row.id, row.subscriber_id, address, row.category)
        rendered[row.id] = replace(base, html=html, headers=headers)
    plan.rendered = list(rendered.values())
