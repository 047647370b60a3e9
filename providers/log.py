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
from collections.abc import Iterable, Mapping, Sequence
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


# The base64 of the files the record may hold: two sends of the largest. Test keys reach this
# provider with 10 MiB files in a loop, and 10,000 of them would have been 140 GB.
RECORD_FILE_CHARACTERS = 32 * 1024 * 1024


class Record(deque[Outbound]):
    """The newest `most` messages, fewer when their files come to more than `file_characters`."""

    def __init__(self, *, most: int, file_characters: int):
        super().__init__(maxlen=most)
        self.file_characters = file_characters
        self.held = 0  # characters of base64 in the messages held, a file counted once per message

    def extend(self, messages: Iterable[Outbound]) -> None:
        for message in messages:
            if len(self) == self.maxlen:
                self.popleft()
            super().append(message)
            self.held += files_size(message)
            while self.held > self.file_characters:
                self.popleft()

    def popleft(self) -> Outbound:
        message = super().popleft()
        self.held -= files_size(message)
        return message

    def clear(self) -> None:
        super().clear()
        self.held = 0


def files_size(message: Outbound) -> int:
    return sum(len(file.content) for file in message.attachments)


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
    record: ClassVar[Record] = Record(most=10_000, file_characters=RECORD_FILE_CHARACTERS)
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
