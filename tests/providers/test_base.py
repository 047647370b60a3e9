from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

from providers.base import retry_after_seconds


def test_retry_after_in_seconds():
    assert retry_after_seconds("12") == 12.0


def test_retry_after_as_http_date():
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= retry_after_seconds(when) <= 30


def test_retry_after_missing_or_garbage_uses_the_default():
    assert retry_after_seconds(None) == 1.0
    assert retry_after_seconds("soon", default=5.0) == 5.0
