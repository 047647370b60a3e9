"""Why a send was refused before anything was written: HTTP errors an SMTP reply can quote.

They are raised deep inside a service's transaction (that is where a daily quota is
taken), so the rollback that follows is what undoes the rest; the API answers them in its
one error shape with their headers, and the SMTP server turns them into a 451 (a send too
large for a whole day's limit: a 552, as no retry can help it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from werkzeug.exceptions import RequestEntityTooLarge, ServiceUnavailable, TooManyRequests


class LimitReached(TooManyRequests):
    """A limit of the project's (messages a minute, a daily quota) has no room for the send."""

    def __init__(self, message: str, errors: Mapping[str, Any], headers: Mapping[str, str]):
        super().__init__(message)
        self.data = {"message": message, "errors": dict(errors), "headers": dict(headers)}
        self.retry_after = int(headers.get("Retry-After", "1"))


class LimitUnknown(ServiceUnavailable):
    """Whether the send fits its daily quota could not be told; a retry can (never unlimited by accident)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.data = {"message": message, "headers": {"Retry-After": "1"}}
        self.retry_after = 1


class LimitTooSmall(RequestEntityTooLarge):
    """A send larger than a whole day of one of the project's limits: it must be made smaller."""

    def __init__(self, message: str, errors: Mapping[str, Any]):
        super().__init__(message)
        self.data = {"message": message, "errors": dict(errors)}
