"""Preferences, required categories and quiet hours, at any hour of any time zone."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from app.delivery.policy import ProjectRules, QuietHours, held_until, opted_out

RULES = ProjectRules.from_settings(
    {"required_categories": ["security"], "category_defaults": {"marketing": {"email": False}}}
)


@pytest.mark.parametrize(
    ("preferences", "category", "channel", "verdict"),
    [
        ({}, None, "email", None),
        ({"channels": {"email": False}}, None, "email", "channels.email"),
        ({"channels": {"email": False}}, "security", "email", None),
        ({"categories": {"security": {"email": False}}}, "security", "email", None),
        ({}, "marketing", "email", "project default categories.marketing.email"),
        ({}, "marketing", "sms", None),
        ({"categories": {"marketing": {"email": True}}}, "marketing", "email", None),
        ({"categories": {"marketing": {"email": False}}}, "marketing", "sms", None),
        (
            {"channels": {"email": False}, "categories": {"news": {"email": True}}},
            "news",
            "email",
            "channels.email",
        ),
    ],
)
def test_opted_out(preferences, category, channel, verdict):
    assert opted_out(preferences, RULES, category, channel) == verdict


NIGHT = {"quiet_hours": {"start": "22:00", "end": "08:00"}}


@pytest.mark.parametrize(
    ("now", "zone", "until"),
    [
        ("2030-01-01T21:59:00+00:00", "UTC", None),
        ("2030-01-01T22:00:00+00:00", "UTC", "2030-01-02T08:00:00+00:00"),
        ("2030-01-02T03:00:00+00:00", "UTC", "2030-01-02T08:00:00+00:00"),
        ("2030-01-02T08:00:00+00:00", "UTC", None),  # released at the end: goes, is not held again
        ("2030-01-01T13:30:00+00:00", "Asia/Tokyo", "2030-01-01T23:00:00+00:00"),  # 22:30 in Tokyo
        ("2030-01-01T13:30:00+00:00", "America/New_York", None),  # 08:30 in New York
        (
            "2030-03-10T09:00:00+00:00",
            "America/New_York",
            "2030-03-10T12:00:00+00:00",
        ),  # DST starts that night
    ],
)
def test_quiet_hours_hold_until_the_window_ends(now, zone, until):
    held = held_until(NIGHT, RULES, "news", False, zone, datetime.fromisoformat(now))
    assert held == (datetime.fromisoformat(until) if until else None)


def test_a_daytime_window_does_not_wrap():
    lunch = QuietHours.parse({"start": "12:00", "end": "14:00"})
    utc = ZoneInfo("UTC")
    assert lunch.ends_at(datetime(2030, 1, 1, 13, tzinfo=UTC), utc) == datetime(2030, 1, 1, 14, tzinfo=UTC)
    assert lunch.ends_at(datetime(2030, 1, 1, 23, tzinfo=UTC), utc) is None


def test_required_categories_bypass_and_project_defaults():
    night = datetime(2030, 1, 1, 23, tzinfo=UTC)
    assert held_until(NIGHT, RULES, "security", False, "UTC", night) is None
    assert held_until(NIGHT, RULES, "news", True, "UTC", night) is None
    project = ProjectRules.from_settings({"quiet_hours": {"start": "22:00", "end": "06:00"}})
    assert held_until({}, project, None, False, None, night) == datetime(2030, 1, 2, 6, tzinfo=UTC)
    assert held_until(NIGHT, project, None, False, None, night) == datetime(2030, 1, 2, 8, tzinfo=UTC)
