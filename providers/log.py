"""The `log` provider: sends nothing, logs and records what it would have sent.

It is the default for every channel and the only provider test keys ever reach, so a
whole pipeline can run on a laptop or in CI without an account anywhere. Its batch size
is a setting (`LOG_PROVIDER_MAX_BATCH`), so the drain benchmark can also play a provider
that takes one message per call.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from typing import ClassVar, Self

from providers.base import Outbound, Outcome, SendResult

logger = logging.getLogger(__name__)

DEFAULT_MAX_BATCH = 500


def max_batch_from(env: Mapping[str, str]) -> int:
    """Messages per call: LOG_PROVIDER_MAX_BATCH, or 500."""
    value = env.get("LOG_PROVIDER_MAX_BATCH", "").strip()
    if not value:
        return DEFAULT_MAX_BATCH
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"LOG_PROVIDER_MAX_BATCH must be a whole number of at least 1; got {value!r}")
    return int(value)


class LogProvider:
    name: ClassVar[str] = "log"
    channels: ClassVar[frozenset[str]] = frozenset({"email", "sms", "push", "webhook"})
    # Read when the class is defined rather than in from_env: app.delivery.dispatch sizes deliver
    # tasks by the class's max_batch, in processes (a prepare-only worker, beat) that never
    # build the adapter.
    max_batch: ClassVar[int] = max_batch_from(os.environ)
    idempotent: bool = True  # it sends nothing, so sending again is harmless
    attachments: ClassVar[bool] = True  # recorded with the rest of the message
    account_settings: ClassVar[tuple[str, ...]] = ()

    # What this process would have sent, newest last; bounded so a long run cannot grow it.
    # 10,000 rendered messages are ~25 MB; 100,000 took a draining worker past 250 MB.
    record: ClassVar[deque[Outbound]] = deque(maxlen=10_000)
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        return cls()

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        with self._lock:
            self.record.extend(batch)
        for message in batch:
            logger.info("log provider: %s to %s: %s", message.channel, message.to, message.subject or message.text)
        return [SendResult(m.message_id, Outcome.SENT, provider_message_id=f"log-{uuid.uuid4().hex}") for m in batch]
