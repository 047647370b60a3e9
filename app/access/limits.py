"""What a project may send in a minute and in a day, and store in a day: its own settings over the deployment's.

Resolved when a key is looked up, so the cached caller carries them (app/access/caller_cache.py)
and a change by an operator reaches every API process with the next request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.config import Settings
from app.enums import Channel


@dataclass(frozen=True)
class SendLimits:
    """A project's limits on messages; no entry (or None) is no limit."""

    daily_quota: tuple[tuple[Channel, int], ...] = ()
    quota_timezone: str = "UTC"
    messages_per_min: int | None = None
    # Bytes a day the sends of live keys, and of test keys, may store.
    storage_bytes: int | None = None
    test_storage_bytes: int | None = None
    transactional_per_min: int | None = None

    def quota_for(self, channel: Channel) -> int | None:
        return dict(self.daily_quota).get(channel)

    def storage_for(self, test: bool) -> int | None:
        return self.test_storage_bytes if test else self.storage_bytes


def send_limits(project_settings: Mapping[str, Any] | None, deployment: Settings) -> SendLimits:
    """A project's settings name a quota per channel (null: none), the message limit and the
    transactional rate (null: none) and the daily storage of each key kind (null: none); what
    they leave out is the deployment's (EMAIL_DAILY_QUOTA, …, RATE_LIMIT_MESSAGES_PER_MINUTE,
    TRANSACTIONAL_PER_MINUTE, DAILY_STORAGE_BYTES, TEST_DAILY_STORAGE_BYTES)."""
    own = project_settings or {}
    storage = own.get("daily_storage_bytes") or {}
    quotas: dict[Channel, int | None] = {**deployment.daily_quotas}
    quotas.update({Channel(name): quota for name, quota in (own.get("daily_quota") or {}).items()})
    return SendLimits(
        daily_quota=tuple(sorted((channel, quota) for channel, quota in quotas.items() if quota is not None)),
        quota_timezone=own.get("quota_timezone") or "UTC",
        messages_per_min=own.get("messages_per_min", deployment.messages_per_min),
        storage_bytes=storage.get("live", deployment.daily_storage_bytes),
        test_storage_bytes=storage.get("test", deployment.test_daily_storage_bytes),
        transactional_per_min=own.get("transactional_per_min", deployment.transactional_per_min),
    )
