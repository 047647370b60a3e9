"""Resend (email): `POST /emails`, and `POST /emails/batch` for up to 100 at once.

Every request carries an `Idempotency-Key` (our message id, or a digest of the batch's ids),
which Resend keeps for 24 hours: a retry after an ambiguous timeout is answered, not re-sent.
Batches use permissive validation, so one invalid message fails alone, not the batch. The
batch endpoint takes no attachments, so a message with files has a request of its own. A Cc
header is not passed on: Resend's `cc` would send to those addresses, which have messages of
their own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from providers.base import (
    MESSAGE_ID_TAG,
    ConfigurationError,
    Outbound,
    Outcome,
    PermanentError,
    ProviderError,
    RateLimited,
    SendResult,
    TransientError,
    addresses,
    attachments_alone,
    error_for_status,
    error_from_table,
    http_client,
    json_body,
    required,
    send_groups,
)
from providers.bounded import Answer

# Resend's error `name` → our error, where the HTTP status alone would say less.
ERRORS: Mapping[str, type[ProviderError]] = {
    "rate_limit_exceeded": RateLimited,
    # Quotas reset daily or monthly: only a person (or the calendar) can fix them.
    "daily_quota_exceeded": ConfigurationError,
    "monthly_quota_exceeded": ConfigurationError,
    "invalid_from_address": ConfigurationError,
    "concurrent_idempotent_requests": TransientError,
    "invalid_idempotent_request": PermanentError,
    "application_error": TransientError,
    "internal_server_error": TransientError,
}


def classify(response: Answer) -> ProviderError:
    body = json_body(response)
    if not isinstance(body, dict):
        return error_for_status(response)
    name = body.get("name")
    # 401/403 (bad key, unverified domain, testing-only account) fall through to the status.
    return error_from_table(ERRORS, name, f"HTTP {response.status_code} {name}: {body.get('message')}", response)


class ResendProvider:
    name: ClassVar[str] = "resend"
    channels: ClassVar[frozenset[str]] = frozenset({"email"})
    max_batch: ClassVar[int] = 100
    # A batch's key is a digest of its ids, and a retried message may land in another batch:
    # the key protects a repeated request, not a message, so a retry must not rely on it;
    # an abandoned claim sent again as the very same calls may (tasks/resend.py).
    idempotent: bool = False
    deduplicates_calls: ClassVar[bool] = True
    attachments: ClassVar[bool] = True
    account_settings: ClassVar[tuple[str, ...]] = ("RESEND_API_KEY", "EMAIL_FROM")

    def __init__(self, api_key: str, sender: str, env: Mapping[str, str]):
        self.sender = sender
        self.client = http_client(
            env, "RESEND", "https://api.resend.com", classify, {"Authorization": f"Bearer {api_key}"}
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        return cls(required(env, "RESEND_API_KEY"), required(env, "EMAIL_FROM"), env)

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        if len(batch) > 1 and not any(m.attachments for m in batch):
            return self._send_batch(batch)  # one call: its error is the whole call's
        # The batch endpoint does not take attachments: a message with files goes alone.
        return send_groups(attachments_alone(batch), self._send_group)

    def _send_group(self, group: Sequence[Outbound]) -> list[SendResult]:
        if len(group) == 1:
            return self._send_one(group)
        return self._send_batch(group)

    def _send_one(self, group: Sequence[Outbound]) -> list[SendResult]:
        message = group[0]
        answer = self.client.post_json("/emails", self._email(message), headers={"Idempotency-Key": message.message_id})
        return [SendResult(message.message_id, Outcome.SENT, provider_message_id=(answer or {}).get("id"))]

    def _send_batch(self, batch: Sequence[Outbound]) -> list[SendResult]:
        ids = ",".join(m.message_id for m in batch)
        answer = self.client.post_json(
            "/emails/batch",
            [self._email(m) for m in batch],
            headers={
                "Idempotency-Key": "batch-" + hashlib.sha256(ids.encode()).hexdigest(),
                "x-batch-validation": "permissive",
            },
        )
        answer = answer or {}
        # `errors` name the rejected emails by index; `data` lists the accepted ones in order.
        rejected = {item["index"]: item.get("message") for item in answer.get("errors") or []}
        accepted = iter(answer.get("data") or [])
        results = []
        for index, message in enumerate(batch):
            if index in rejected:
                results.append(SendResult(message.message_id, Outcome.PERMANENT, error=rejected[index]))
            elif (item := next(accepted, None)) is not None:
                results.append(SendResult(message.message_id, Outcome.SENT, provider_message_id=item["id"]))
            else:
                results.append(SendResult(message.message_id, Outcome.TRANSIENT, error="missing from Resend's answer"))
        return results

    def _email(self, message: Outbound) -> dict[str, Any]:
        email: dict[str, Any] = {
            "from": message.from_address or self.sender,
            "to": [message.to],
            "subject": message.subject or "",
            # A tag carries our id into Resend's webhooks, so events find their message.
            "tags": [{"name": MESSAGE_ID_TAG, "value": message.message_id}],
        }
        optional = {
            "text": message.text,
            "html": message.html,
            "reply_to": addresses(message.reply_to) if message.reply_to else None,
            "headers": dict(message.headers) or None,
            "attachments": [
                {"filename": a.filename, "content": a.content, "content_type": a.content_type}
                for a in message.attachments
            ]
            or None,
        }
        email.update({key: value for key, value in optional.items() if value is not None})
        return email
