"""Times from outside, as PostgreSQL stores them: in UTC, within the years Python can hold; and time zones."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from marshmallow import ValidationError, fields

from app.delivery.policy import is_time_zone


class UtcDateTime(fields.AwareDateTime):
    """An ISO 8601 time with its offset, turned into UTC.

    Python takes offsets up to ±23:59 where PostgreSQL refuses any past ±15:59, and a time
    near the year 1 or 9999 can overflow on its way to UTC: both are a 422 here, not a 500
    from the database.
    """

    default_error_messages = {"range": "Out of range: the time must fall within the years 1 to 9999 in UTC."}

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> datetime:
        aware = super()._deserialize(value, attr, data, **kwargs)
        try:
            return aware.astimezone(UTC)
        except OverflowError:
            raise self.make_error("range") from None


def time_zone(value: str) -> None:
    """An IANA name, checked against the zone database the clocks will read it from."""
    if not is_time_zone(value):
        raise ValidationError("Not an IANA time zone like Europe/Berlin.")
