"""A subscriber's own preference page: the link to it, what it shows, and what a save changes.

The page has no key and sets no cookie. Its link's signed token names the project and the
subscriber (app.content.tokens), and nothing the page posts can name another; its form
carries a CSRF token signed with its own salt and bound to that link, so a form from one
link's page is refused on another's. A save replaces the preferences through the same
function the API uses (app.services.preferences.replace), with its event.

Required categories are shown switched on and locked, and a save never writes a switch
for one, whatever the form says. A switch is stored only where it differs from the
project's default or was stored before, so a later change of a default still reaches the
subscriber who never touched that switch.
"""

from __future__ import annotations

import copy
import hashlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from zoneinfo import available_timezones

from marshmallow import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from app.content import tokens
from app.content.rendering import pick_locale
from app.content.tokens import Purpose
from app.content.tracking import creation_stamp, preferences_url
from app.delivery.policy import is_time_zone
from app.enums import Channel
from app.errors import abort
from app.models import Project, Subscriber
from app.schemas.core import QuietHoursSchema
from app.services import preferences

# A page left open this long must be reloaded before it saves.
FORM_LIFETIME = 6 * 3600
CHANNEL_LABELS = {
    Channel.EMAIL: "Email",
    Channel.SMS: "Text messages (SMS)",
    Channel.PUSH: "Push notifications",
    Channel.WEBHOOK: "Webhooks",
    Channel.IN_APP: "In-app messages",
}
FALLBACK_NAME_LOCALE = "en"
MISSING_CSRF = "The form came without its security token. Reload the page and save again."
WRONG_CSRF = "This form is out of date or belongs to another page. Reload the page and save again."


@dataclass(frozen=True)
class Switch:
    """One checkbox: its form field, its label, and whether it is on and may change."""

    name: str
    label: str
    checked: bool
    locked: bool = False


@dataclass(frozen=True)
class CategoryRow:
    """One category's switches, one per channel; `lang` is the locale its name is in."""

    key: str
    name: str
    lang: str | None
    required: bool
    switches: list[Switch]


@dataclass
class PageView:
    """Everything the page shows; `errors` are per form field, after a refused save."""

    project_name: str
    recipient: str | None
    channels: list[Switch]
    categories: list[CategoryRow]
    quiet_start: str
    quiet_end: str
    default_quiet: str | None
    timezone: str
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Audience:
    """What one page load reads: the project's settings and channels, the subscriber's row."""

    project: Project
    subscriber: Subscriber

    @property
    def settings(self) -> Mapping[str, Any]:
        return self.project.settings or {}

    @property
    def required(self) -> frozenset[str]:
        return frozenset(self.settings.get("required_categories") or ())

    def default(self, category: str, channel: str) -> bool:
        return ((self.settings.get("category_defaults") or {}).get(category) or {}).get(channel, True)

    def categories(self) -> list[str]:
        """Every category the project or the subscriber names: required ones first."""
        named = set(self.required)
        named |= set(self.settings.get("category_defaults") or {})
        named |= set(self.settings.get("category_names") or {})
        named |= set((self.subscriber.preferences or {}).get("categories") or {})
        return sorted(named, key=lambda category: (category not in self.required, category))

    def channels(self) -> list[str]:
        return [channel.value for channel in Channel if channel.value in (self.project.channels or ())]


@dataclass(frozen=True)
class Holder:
    """Whom a page token is for: a subscriber of a project, as created at `stamp`."""

    project_id: str
    subscriber_id: str
    stamp: int


def link(
    db: sessionmaker[Session], public_url: str, project_id: str, external_id: str, expires_in: int
) -> dict[str, Any]:
    """A signed link to the subscriber's page, valid for `expires_in` seconds; 404 for an unknown subscriber."""
    expires_at = int(time.time() + expires_in)
    url = link_until(db, public_url, project_id, external_id, expires_at)
    if url is None:
        abort(404, f"No subscriber {external_id!r}.")
    return {"url": url, "expires_at": datetime.fromtimestamp(expires_at, UTC)}


def link_until(
    db: sessionmaker[Session], public_url: str, project_id: str, external_id: str, expires_at: int
) -> str | None:
    """The subscriber's page link, or None when there is no such subscriber."""
    with db() as session:
        subscriber = session.get(Subscriber, (project_id, external_id))
        if subscriber is None:
            return None
        return preferences_url(public_url, project_id, external_id, subscriber.created_at, expires_at)


def holder(token: str) -> Holder | None:
    """Whom an authentic, current page token is for; None for anything else."""
    verified = tokens.verify(Purpose.PREFERENCES, token)
    if verified is None or verified.expired:
        return None
    subscriber, stamp = verified.claims.get("s"), verified.claims.get("c")
    if not isinstance(subscriber, str) or not isinstance(stamp, int):
        return None
    return Holder(verified.claims["p"], subscriber, stamp)


def csrf_token(project_id: str, link_token: str) -> str:
    """A fresh token for one rendering of the form, good only with this link."""
    claims = {"p": project_id, "t": _digest(link_token), "n": secrets.token_urlsafe(8)}
    return tokens.mint(Purpose.PREFERENCES_FORM, claims, FORM_LIFETIME)


def csrf_refusal(project_id: str, link_token: str, given: str | None) -> tuple[int, str] | None:
    """Why a posted form is refused (400 without a token, 403 with a wrong one), or None."""
    if not given:
        return 400, MISSING_CSRF
    verified = tokens.verify(Purpose.PREFERENCES_FORM, given)
    if (
        verified is None
        or verified.expired
        or verified.claims["p"] != project_id
        or verified.claims.get("t") != _digest(link_token)
    ):
        return 403, WRONG_CSRF
    return None


def _digest(link_token: str) -> str:
    return hashlib.sha256(link_token.encode()).hexdigest()[:32]


def view(db: sessionmaker[Session], holder: Holder) -> PageView | None:
    """The page as the subscriber's preferences stand; None when the subscriber is gone."""
    with db() as session:
        audience = _audience(session, holder)
        return None if audience is None else _view(audience)


def save(db: sessionmaker[Session], holder: Holder, form: Mapping[str, str]) -> PageView | None:
    """Apply a posted form; the page as saved, or as posted with `errors` when refused (nothing saved).
    None when the subscriber is gone."""
    with db.begin() as session:
        audience = _audience(session, holder, lock=True)
        if audience is None:
            return None
        quiet, timezone, errors = _read_times(form)
        if errors:
            refused = _view(audience)
            refused.quiet_start, refused.quiet_end = form.get("quiet_start", ""), form.get("quiet_end", "")
            refused.timezone, refused.errors = form.get("timezone", ""), errors
            return refused
        stored = _switches(audience, form)
        stored["quiet_hours"] = quiet
        extra = {"timezone": timezone} if "timezone" in form else None
        preferences.replace(session, holder.project_id, holder.subscriber_id, stored, preferences.BY_PAGE, extra)
        session.flush()
        session.refresh(audience.subscriber)
        return _view(audience)


def _audience(session: Session, holder: Holder, lock: bool = False) -> Audience | None:
    """The project and subscriber the token names; None when either is gone, or the
    subscriber is a new one under an erased one's id."""
    project = session.get(Project, holder.project_id)
    subscriber = session.get(Subscriber, (holder.project_id, holder.subscriber_id), with_for_update=lock)
    if project is None or subscriber is None or creation_stamp(subscriber.created_at) != holder.stamp:
        return None
    return Audience(project, subscriber)


def _view(audience: Audience) -> PageView:
    subscriber = audience.subscriber
    own = subscriber.preferences or {}
    channels = audience.channels()
    off = own.get("channels") or {}
    switches = [Switch(f"channel.{c}", CHANNEL_LABELS[Channel(c)], off.get(c) is not False) for c in channels]
    rows = [_category_row(audience, category, channels) for category in audience.categories()]
    quiet = own.get("quiet_hours") or {}
    default = audience.settings.get("quiet_hours")
    return PageView(
        project_name=audience.project.name,
        recipient=subscriber.email or subscriber.phone,
        channels=switches,
        categories=rows,
        quiet_start=quiet.get("start", ""),
        quiet_end=quiet.get("end", ""),
        default_quiet=f"{default['start']} to {default['end']}" if default else None,
        timezone=subscriber.timezone or "",
    )


def _category_row(audience: Audience, category: str, channels: list[str]) -> CategoryRow:
    own = ((audience.subscriber.preferences or {}).get("categories") or {}).get(category) or {}
    required = category in audience.required
    switches = [
        Switch(
            f"category.{category}.{channel}",
            CHANNEL_LABELS[Channel(channel)],
            True if required else own.get(channel, audience.default(category, channel)),
            locked=required,
        )
        for channel in channels
    ]
    name, lang = _name(audience, category)
    return CategoryRow(category, name, lang, required, switches)


def _name(audience: Audience, category: str) -> tuple[str, str | None]:
    """The category's name in the subscriber's locale, else its language, else English, else its key."""
    names = (audience.settings.get("category_names") or {}).get(category) or {}
    locale = pick_locale(names, [audience.subscriber.locale, FALLBACK_NAME_LOCALE], "")
    return (names[locale], locale) if locale in names else (category, None)


def _switches(audience: Audience, form: Mapping[str, str]) -> dict[str, Any]:
    """The preferences the form asks for; required categories keep what they had, unread."""
    stored = copy.deepcopy(audience.subscriber.preferences or {})
    channels = audience.channels()
    own_channels = stored.setdefault("channels", {})
    for channel in channels:
        _set(own_channels, channel, f"channel.{channel}" in form, True)
    own_categories = stored.setdefault("categories", {})
    for category in audience.categories():
        if category in audience.required:
            continue
        own = own_categories.setdefault(category, {})
        for channel in channels:
            _set(own, channel, f"category.{category}.{channel}" in form, audience.default(category, channel))
        if not own:
            del own_categories[category]
    return stored


def _set(switches: dict[str, bool], key: str, value: bool, default: bool) -> None:
    """Store a switch only where it differs from the default or was stored already."""
    if key in switches or value != default:
        switches[key] = value


def _read_times(form: Mapping[str, str]) -> tuple[dict[str, str] | None, str | None, dict[str, str]]:
    """Quiet hours (both times or neither) and the time zone, or the errors to show by field."""
    errors: dict[str, str] = {}
    start, end = form.get("quiet_start", "").strip()[:5], form.get("quiet_end", "").strip()[:5]
    quiet = None
    if bool(start) != bool(end):
        errors["quiet_start" if not start else "quiet_end"] = "Give both times, or neither for no quiet hours."
    elif start:
        try:
            quiet = QuietHoursSchema().load({"start": start, "end": end})
        except ValidationError as error:
            errors.update({f"quiet_{name}": problems[0] for name, problems in error.normalized_messages().items()})
    timezone = form.get("timezone", "").strip() or None
    if timezone is not None and not is_time_zone(timezone):
        errors["timezone"] = "Choose a time zone from the list."
    return quiet, timezone, errors


@lru_cache(maxsize=1)
def time_zones() -> list[str]:
    """The zones the page offers, as the API accepts them."""
    return sorted(zone for zone in available_timezones() if "/" in zone or zone == "UTC")
