"""Who may be contacted, and when: preferences, required categories and quiet hours.

Pure functions over a subscriber's preferences and a project's settings (both jsonb as
the API stored them), so the prepare step can decide a whole batch in memory after its
few set-based reads, and tests can check every rule at any hour of any time zone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


@dataclass(frozen=True)
class QuietHours:
    """A daily window in local time, [start, end); it wraps midnight when start > end."""

    start: time
    end: time

    @classmethod
    def parse(cls, value: Mapping[str, str] | None) -> QuietHours | None:
        if not value:
            return None
        return cls(time.fromisoformat(value["start"]), time.fromisoformat(value["end"]))

    def ends_at(self, now: datetime, zone: ZoneInfo) -> datetime | None:
        """When the window that `now` falls in ends (UTC); None when `now` is outside it."""
        local = now.astimezone(zone)
        clock = local.time().replace(tzinfo=None)
        if self.start < self.end:
            inside, end_day = self.start <= clock < self.end, local.date()
        else:
            inside = clock >= self.start or clock < self.end
            end_day = local.date() if clock < self.end else local.date() + timedelta(days=1)
        if not inside:
            return None
        end = datetime.combine(end_day, self.end, tzinfo=zone).astimezone(UTC)
        return end if end > now else None


@dataclass(frozen=True)
class ProjectRules:
    """A project's audience settings: required categories, category defaults, quiet hours."""

    required_categories: frozenset[str] = frozenset()
    category_defaults: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)
    quiet_hours: QuietHours | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None) -> ProjectRules:
        settings = settings or {}
        return cls(
            frozenset(settings.get("required_categories") or ()),
            settings.get("category_defaults") or {},
            QuietHours.parse(settings.get("quiet_hours")),
        )


def opted_out(preferences: Mapping[str, Any], rules: ProjectRules, category: str | None, channel: str) -> str | None:
    """The preference that turns this message off (e.g. `categories.marketing.email`), or None.

    A required category is never off. Otherwise a channel switched off wins; then the
    subscriber's own category-by-channel switch; then the project's default for it.
    """
    if category in rules.required_categories:
        return None
    if (preferences.get("channels") or {}).get(channel) is False:
        return f"channels.{channel}"
    if category is None:
        return None
    own = ((preferences.get("categories") or {}).get(category) or {}).get(channel)
    if own is not None:
        return None if own else f"categories.{category}.{channel}"
    if (rules.category_defaults.get(category) or {}).get(channel) is False:
        return f"project default categories.{category}.{channel}"
    return None


def held_until(
    preferences: Mapping[str, Any],
    rules: ProjectRules,
    category: str | None,
    bypass: bool,
    timezone: str | None,
    now: datetime,
) -> datetime | None:
    """When a message that would go out `now` may go, if quiet hours hold it; else None.

    The subscriber's own quiet hours replace the project's default. Required categories
    and `bypass_quiet_hours` go at once. The window is [start, end), so a message released
    at its end is outside it and goes on instead of being held again.
    """
    if bypass or category in rules.required_categories:
        return None
    quiet = QuietHours.parse(preferences.get("quiet_hours")) or rules.quiet_hours
    return quiet.ends_at(now, zone(timezone)) if quiet else None


@lru_cache(maxsize=512)
def zone(name: str | None) -> ZoneInfo:
    """The subscriber's time zone; UTC when it has none (the API accepts valid names only)."""
    try:
        return ZoneInfo(name) if name else ZoneInfo("UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def is_time_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True
