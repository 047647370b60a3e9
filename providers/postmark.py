"""Postmark (email): `POST /email`, and `POST /email/batch` for up to 500 at once.

The batch endpoint answers HTTP 200 even when some messages failed: each message has its
own `ErrorCode` (0 for success), so every code is mapped per message. A single send
answers 422 with the same codes. Postmark has no idempotency key; our id travels in
`Metadata` so its webhooks can name the message. A message with attachments has a request
of its own. A Cc header is not passed on: Postmark's `Cc` would send to those addresses,
which have messages of their own.
"""

from __future__ import annotations

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
    SuppressRecipient,
    TransientError,
    attachments_alone,
    error_for_status,
    error_from_table,
    http_client,
    json_body,
    required,
    send_groups,
)
from providers.bounded import Answer, batch_limit

# Postmark API error codes (developer docs, "API error codes").
ERRORS: Mapping[int, type[ProviderError]] = {
    10: ConfigurationError,  # bad or missing server token
    100: TransientError,  # maintenance
    300: PermanentError,  # invalid email request
    400: ConfigurationError,  # sender signature not found
    401: ConfigurationError,  # sender signature not confirmed
    402: PermanentError,  # invalid JSON
    403: PermanentError,  # incompatible JSON
    405: ConfigurationError,  # not allowed to send (out of credits)
    406: SuppressRecipient,  # inactive recipient: hard-bounced, complained or unsubscribed
    409: PermanentError,  # JSON required
    410: PermanentError,  # too many batch messages
    411: PermanentError,  # forbidden attachment type
    412: ConfigurationError,  # account pending approval
    413: ConfigurationError,  # account may not send
    429: RateLimited,
}


def error_for(code: Any, message: Any, response: Answer) -> ProviderError:
    return error_from_table(ERRORS, code, f"Postmark {code}: {message}", response)


def classify(response: Answer) -> ProviderError:
    body = json_body(response)
    if not isinstance(body, dict) or "ErrorCode" not in body:
        return error_for_status(response)
    return error_for(body["ErrorCode"], body.get("Message"), response)


class PostmarkProvider:
    name: ClassVar[str] = "postmark"
    channels: ClassVar[frozenset[str]] = frozenset({"email"})
    max_batch: ClassVar[int] = 500
    idempotent: bool = False  # Postmark takes no idempotency key
    attachments: ClassVar[bool] = True
    account_settings: ClassVar[tuple[str, ...]] = ("POSTMARK_SERVER_TOKEN", "EMAIL_FROM", "POSTMARK_MESSAGE_STREAM")

    def __init__(self, token: str, sender: str, stream: str, env: Mapping[str, str]):
        self.sender = sender
        self.stream = stream
        self.client = http_client(
            env,
            "POSTMARK",
            "https://api.postmarkapp.com",
            classify,
            {"X-Postmark-Server-Token": token, "Accept": "application/json"},
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        return cls(
            required(env, "POSTMARK_SERVER_TOKEN"),
            required(env, "EMAIL_FROM"),
            env.get("POSTMARK_MESSAGE_STREAM", "").strip() or "outbound",
            env,
        )

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        if len(batch) > 1 and not any(m.attachments for m in batch):
            return self._send_batch(batch)  # one call: its error is the whole call's
        # A message with attachments goes alone: one message may weigh 10 MB, a whole batch
        # request only 50 MB.
        return send_groups(attachments_alone(batch), self._send_group)

    def _send_group(self, group: Sequence[Outbound]) -> list[SendResult]:
        if len(group) == 1:
            return self._send_one(group)
        return self._send_batch(group)

    def _send_batch(self, batch: Sequence[Outbound]) -> list[SendResult]:
        # About 150 bytes of answer per message: 500 of them take more than one answer's cap.
        response = self.client.request(
            "POST", "/email/batch", batch_limit(len(batch)), json=[self._email(m) for m in batch]
        )
        answers = self.client.success_json(response, "/email/batch")
        if not isinstance(answers, list):
            raise TransientError(f"unreadable batch answer: {response.excerpt(200)!r}", ambiguous=True)
        # Answers come in the order of the request's messages.
        results = [self._result(m, answer, response) for m, answer in zip(batch, answers, strict=False)]
        results += [
            SendResult(m.message_id, Outcome.TRANSIENT, error="missing from Postmark's answer")
            for m in batch[len(answers) :]
        ]
        return results

    def _send_one(self, group: Sequence[Outbound]) -> list[SendResult]:
        response = self.client.request("POST", "/email", json=self._email(group[0]))
        return [self._result(group[0], self.client.success_json(response, "/email"), response)]

    @staticmethod
    def _result(message: Outbound, answer: Any, response: Answer) -> SendResult:
        if isinstance(answer, dict) and answer.get("ErrorCode") == 0:
            return SendResult(message.message_id, Outcome.SENT, provider_message_id=answer.get("MessageID"))
        if not isinstance(answer, dict):
            return SendResult(message.message_id, Outcome.TRANSIENT, error=f"unreadable answer: {answer!r}")
        error = error_for(answer.get("ErrorCode"), answer.get("Message"), response)
        return SendResult.from_error(message.message_id, error)

    def _email(self, message: Outbound) -> dict[str, Any]:
        email: dict[str, Any] = {
            "From": message.from_address or self.sender,
            "To": message.to,
            "Subject": message.subject or "",
            "MessageStream": self.stream,
            "Metadata": {MESSAGE_ID_TAG: message.message_id},
        }
        optional = {
            "TextBody": message.text,
            "HtmlBody": message.html,
            "ReplyTo": message.reply_to,
            "Headers": [{"Name": k, "Value": v} for k, v in message.headers.items()] or None,
            "Attachments": [
                {"Name": a.filename, "Content": a.content, "ContentType": a.content_type} for a in message.attachments
            ]
            or None,
        }
        email.update({key: value for key, value in optional.items() if value is not None})
        return email
