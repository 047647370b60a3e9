"""Templates: versioned, per channel, with locale variants; preview renders a version.

Every change makes a new version and old versions stay readable, because a message
records the (key, version) it was accepted with and is rendered with exactly that.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, NamedTuple

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session, sessionmaker

from app.config import current_settings
from app.content.rendering import (
    FIELD_ORDER,
    FIELDS,
    Compiled,
    CompiledCache,
    RenderError,
    check_variant,
    pick_locale,
    render,
    render_version,
)
from app.content.sms import measure
from app.enums import Channel
from app.errors import abort, field_error
from app.models import Template
from app.pagination import decode_cursor, page
from app.redis_client import redis_for
from app.remembered import Remembered, forget_all, request_generation
from app.services import email_extras

# What a variant must have for its channel to send anything: all of one group, per channel.
REQUIRED: dict[Channel, list[tuple[str, ...]]] = {
    Channel.EMAIL: [("subject", "text"), ("subject", "html")],
    Channel.SMS: [("text",)],
    Channel.PUSH: [("title",), ("body",)],
    Channel.WEBHOOK: [("payload",)],
    Channel.IN_APP: [("title",), ("body",)],
}
DEFAULT_LOCALE = "en"
INVALID = "Invalid request."

# Words checked and compiled, by project and a hash of the words: the editor previews them
# again as one types, and a save of what was just previewed finds them done.
checked_words: CompiledCache[tuple[Compiled, dict[str, list[str]]]] = CompiledCache(size=256, code=2 * 1024 * 1024)


def create(db: sessionmaker[Session], project_id: str, data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 of a new key; its locale (default `en`) becomes the template's default."""
    channel: Channel = data["channel"]
    locale = data.get("locale") or DEFAULT_LOCALE
    variant, _ = _variant(project_id, channel, data)
    tracking = _tracking(channel, data.get("tracking"))
    with db.begin() as session:
        sender = _sender(session, project_id, channel, data, None)
        row = _insert_version(session, project_id, data["key"], 1, channel, locale, {locale: variant}, tracking, sender)
    if row is None:
        abort(409, f"Template {data['key']!r} exists already; PUT /v1/templates/{data['key']} changes it.")
    return present(row, locale)


def update(db: sessionmaker[Session], project_id: str, key: str, data: dict[str, Any]) -> dict[str, Any]:
    """A new version with this locale's variant replaced and the other variants carried over.

    Saving the same words again makes no new version. Two changes at the same moment: one
    wins, the other is a 409 to retry against the new latest version. The words are checked
    and compiled before the latest version is locked: compiling may take half a second of
    CPU, which neither a row lock nor a pooled connection should be held for.
    """
    with db() as session:
        pinned = latest(session, project_id, key)
    if pinned is None:
        abort(404, f"No template {key!r}.")
    if data.get("channel", pinned.channel) != pinned.channel:  # a key's channel never changes
        field_error(422, INVALID, "json", "channel", f"Template {key!r} is for {pinned.channel}.")
    variant, _ = _variant(project_id, pinned.channel, data)
    with db.begin() as session:
        current = _version(session, project_id, key, None, lock=True)
        locale = data.get("locale") or current.default_locale
        variants = {**current.variants, locale: variant}
        tracking = _tracking(current.channel, data["tracking"]) if "tracking" in data else current.tracking
        sender = _sender(session, project_id, current.channel, data, current.sender)
        if variants == current.variants and tracking == current.tracking and sender == current.sender:
            return present(current, locale)
        row = _insert_version(
            session,
            project_id,
            key,
            current.version + 1,
            current.channel,
            current.default_locale,
            variants,
            tracking,
            sender,
        )
    if row is None:
        abort(409, f"Template {key!r} changed at the same time; send the change again.")
    forget_all(redis_for(current_settings().redis_url))
    return present(row, locale)


def get(
    db: sessionmaker[Session], project_id: str, key: str, version: int | None, locale: str | None
) -> dict[str, Any]:
    with db() as session:
        row = _version(session, project_id, key, version)
    return present(row, pick_locale(row.variants, [locale], row.default_locale))


def list_page(db: sessionmaker[Session], project_id: str, cursor: str | None, limit: int) -> dict[str, Any]:
    """The latest version of each key, by key."""
    after = decode_cursor(cursor, str)
    query = select(Template).where(Template.project_id == project_id)
    if after is not None:
        query = query.where(Template.key > after[0])
    query = query.distinct(Template.key).order_by(Template.key, Template.version.desc()).limit(limit + 1)
    with db() as session:
        rows = session.scalars(query).all()
    result = page(rows, limit, lambda t: [t.key])
    result["items"] = [present(row, row.default_locale) for row in result["items"]]
    return result


def preview(db: sessionmaker[Session], project_id: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """Render a version with `data`; a missing variable is a 422 that names it."""
    with db() as session:
        row = _version(session, project_id, key, body.get("version"))
    return _preview_answer(row.channel, lambda: render_version(row, [body.get("locale")], body["data"]))


def preview_draft(
    db: sessionmaker[Session], project_id: str, key: str, fields: dict[str, Any], data: dict[str, Any]
) -> dict[str, Any]:
    """Render words not saved yet (the console editor's preview as one types): checked and
    compiled as a save does, remembered by their hash, and rendered in the same sandbox under
    the same limits as a send; nothing is stored."""
    with db() as session:
        latest = _version(session, project_id, key, None)
    _, compiled = _variant(project_id, latest.channel, fields)
    locale = fields.get("locale") or latest.default_locale
    return _preview_answer(latest.channel, lambda: (locale, render(compiled, data)))


def _preview_answer(channel: Channel, rendering: Callable[[], tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """What a preview answers: the rendered fields, and for SMS its length and segments."""
    try:
        locale, rendered = rendering()
    except RenderError as error:
        where = "data" if error.undefined else "template"
        abort(
            422,
            f"The template could not be rendered: {error.detail}",
            errors={"json": {where: [f"{error.field}: {error.detail}"]}},
        )
    answer = {"locale": locale, **{k: v for k, v in rendered.items() if v is not None}}
    if channel is Channel.SMS:
        length = measure(rendered.get("text") or "")
        answer.update(length=length.length, segments=length.segments, encoding=length.encoding)
    return answer


class Pinned(NamedTuple):
    """A template's latest version: what a new message renders, for which channel, with the
    sender defaults that version carries (email)."""

    version: int
    channel: Channel
    sender: dict[str, Any] | None


# Every send asks for its template's latest version; it changes only when `update` saves one,
# which makes every process forget (app/remembered.py). Keyed by (project, template key).
_latest_versions: Remembered[tuple[str, str], Pinned] = Remembered()


def pin(session: Session, project_id: str, key: str, channel: Channel) -> Pinned:
    """The version a new message will be rendered with: the latest; 422 when there is none."""
    found = latest(session, project_id, key)
    if found is None:
        field_error(422, INVALID, "json", "template", f"Unknown template {key!r}.")
    if found.channel != channel:
        field_error(422, INVALID, "json", "template", f"Template {key!r} is for {found.channel}, not {channel}.")
    return found


def latest(session: Session, project_id: str, key: str) -> Pinned | None:
    """The template's latest version, remembered per process; None when the key has none."""
    generation = request_generation(redis_for(current_settings().redis_url))
    return _latest_versions.get((project_id, key), generation, lambda: _look_up_latest(session, project_id, key))


def _look_up_latest(session: Session, project_id: str, key: str) -> Pinned | None:
    found = session.execute(
        select(Template.version, Template.channel, Template.sender)
        .where(Template.project_id == project_id, Template.key == key)
        .order_by(Template.version.desc())
        .limit(1)
    ).first()
    return None if found is None else Pinned(found.version, found.channel, found.sender)


def present(row: Template, locale: str) -> dict[str, Any]:
    return {
        "key": row.key,
        "channel": row.channel.value,
        "version": row.version,
        "locale": locale,
        "default_locale": row.default_locale,
        "locales": sorted(row.variants),
        "tracking": row.tracking,
        "sender": (row.sender or {}).get("from"),
        "reply_to": (row.sender or {}).get("reply_to"),
        **row.variants[locale],
        "created_at": row.created_at,
    }


def _insert_version(
    session: Session,
    project_id: str,
    key: str,
    version: int,
    channel: Channel,
    default_locale: str,
    variants: dict[str, Any],
    tracking: dict[str, Any] | None = None,
    sender: dict[str, Any] | None = None,
) -> Template | None:
    """Write one version; None when that (key, version) exists already (the caller says why)."""
    return session.scalars(
        insert(Template)
        .values(
            project_id=project_id,
            key=key,
            version=version,
            channel=channel,
            default_locale=default_locale,
            variants=variants,
            tracking=tracking,
            sender=sender,
        )
        .on_conflict_do_nothing()
        .returning(Template)
    ).first()


def _version(session: Session, project_id: str, key: str, version: int | None, lock: bool = False) -> Template:
    query = select(Template).where(Template.project_id == project_id, Template.key == key)
    query = query.where(Template.version == version) if version else query.order_by(Template.version.desc())
    if lock:
        query = query.with_for_update()
    row = session.scalars(query.limit(1)).first()
    if row is None:
        abort(404, f"No template {key!r}" + (f" version {version}." if version else "."))
    return row


def _tracking(channel: Channel, tracking: dict[str, Any] | None) -> dict[str, Any] | None:
    """The template's tracking switches; only email is tracked. Nothing set is stored as None."""
    if tracking and channel is not Channel.EMAIL:
        field_error(422, INVALID, "json", "tracking", f"Only email is tracked, not {channel}.")
    switches = {name: value for name, value in (tracking or {}).items() if value is not None}
    return switches or None


# A template's sender defaults: schema field → key stored in `templates.sender`.
SENDER_FIELDS = {"sender": "from", "reply_to": "reply_to"}


def _sender(
    session: Session, project_id: str, channel: Channel, data: dict[str, Any], previous: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The version's sender defaults: those given (null clears one), the others kept from
    `previous`. Email only; a new `from` must be a verified sender (it is checked again at
    every send, since an operator may take it off the list)."""
    given = {stored: data[name] for name, stored in SENDER_FIELDS.items() if name in data}
    if channel is not Channel.EMAIL:
        named = [stored for stored, value in given.items() if value is not None]
        if named:
            field_error(422, INVALID, "json", named[0], f"Only email templates have a sender, not {channel}.")
        return None
    if given.get("from") is not None:
        email_extras.check_sender(session, project_id, given["from"]["email"], "from")
    kept = {key: value for key, value in {**(previous or {}), **given}.items() if value is not None}
    return kept or None


def _variant(project_id: str, channel: Channel, data: dict[str, Any]) -> tuple[dict[str, Any], Compiled]:
    """The fields of one locale, checked for the channel and for unsafe template code, and compiled."""
    variant = {field: data[field] for field in FIELD_ORDER if field in data}
    allowed = FIELDS.get(channel)
    if allowed is None:
        field_error(422, INVALID, "json", "channel", f"There are no templates for {channel}.")
    errors: dict[str, list[str]] = {}
    for field in variant.keys() - set(allowed):
        errors[field] = [f"A {channel} template has no {field}; it has {', '.join(allowed)}."]
    if not any(all(field in variant for field in group) for group in REQUIRED[channel]):
        needs = " or ".join(" and ".join(group) for group in REQUIRED[channel])
        errors.setdefault("_schema", []).append(f"A {channel} template needs {needs}.")
    words = hashlib.sha256(json.dumps(variant, sort_keys=True).encode()).hexdigest()
    compiled, problems = checked_words.get((project_id, words), lambda: check_variant(variant))
    for field, found in problems.items():
        errors.setdefault(field, []).extend(found)
    if errors:
        abort(422, INVALID, errors={"json": errors})
    return variant, compiled
