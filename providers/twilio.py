"""Twilio (SMS): `POST /2010-04-01/Accounts/{sid}/Messages.json`, form-encoded, Basic auth.

One message per request. Twilio's errors carry a numeric `code`; the ones that say more
than the HTTP status are mapped below. 201 means queued at Twilio, not delivered.

Twilio echoes no metadata, so where the engine gives a status callback URL each message
names it as its `StatusCallback` with our message id in the query: Twilio signs the URL it
calls back, so the id returns authenticated and finds a message whose answer we never read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Self

from providers.base import (
    STATUS_CALLBACK_URL,
    ConfigurationError,
    Outbound,
    Outcome,
    PermanentError,
    ProviderError,
    RateLimited,
    SendResult,
    Unsubscribed,
    error_for_status,
    error_from_table,
    http_client,
    json_body,
    one_by_one,
    required,
    send_groups,
    with_message_id,
)
from providers.bounded import Answer

# Twilio error codes (twilio.com/docs/api/errors).
ERRORS: Mapping[int, type[ProviderError]] = {
    20003: ConfigurationError,  # authentication failed
    20404: ConfigurationError,  # account or messaging service not found
    20429: RateLimited,  # too many requests
    21211: PermanentError,  # invalid 'To' phone number
    21212: ConfigurationError,  # invalid 'From' phone number
    21408: PermanentError,  # sending to this region is not enabled
    21602: PermanentError,  # message body is required
    21606: ConfigurationError,  # 'From' is not a valid message-capable Twilio number
    21608: PermanentError,  # trial accounts may only send to verified numbers
    21610: Unsubscribed,  # the recipient replied STOP
    21611: RateLimited,  # the 'From' number's queue is full
    21612: PermanentError,  # 'To' is not reachable by SMS
    21614: PermanentError,  # 'To' is not a mobile number
    21617: PermanentError,  # body exceeds 1,600 characters
}


def classify(response: Answer) -> ProviderError:
    body = json_body(response)
    if not isinstance(body, dict) or "code" not in body:
        return error_for_status(response)
    return error_from_table(ERRORS, body["code"], f"Twilio {body['code']}: {body.get('message')}", response)


class TwilioProvider:
    name: ClassVar[str] = "twilio"
    channels: ClassVar[frozenset[str]] = frozenset({"sms"})
    max_batch: ClassVar[int] = 1
    idempotent: bool = False  # Twilio takes no idempotency key
    account_settings: ClassVar[tuple[str, ...]] = (
        "TWILIO_ACCOUNT_SID",
        "TWILIO_AUTH_TOKEN",
        "TWILIO_FROM",
        "TWILIO_MESSAGING_SERVICE_SID",
    )

    def __init__(self, account_sid: str, auth_token: str, sender: dict[str, str], env: Mapping[str, str]):
        self.path = f"/2010-04-01/Accounts/{account_sid}/Messages.json"
        self.sender = sender
        self.status_callback = env.get(STATUS_CALLBACK_URL, "").strip() or None
        self.client = http_client(env, "TWILIO", "https://api.twilio.com", classify)
        self.client.session.auth = (account_sid, auth_token)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        """The sender is a Messaging Service (TWILIO_MESSAGING_SERVICE_SID) or a number (TWILIO_FROM)."""
        account_sid, auth_token = required(env, "TWILIO_ACCOUNT_SID"), required(env, "TWILIO_AUTH_TOKEN")
        service = env.get("TWILIO_MESSAGING_SERVICE_SID", "").strip()
        sender = {"MessagingServiceSid": service} if service else {"From": required(env, "TWILIO_FROM")}
        return cls(account_sid, auth_token, sender, env)

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        return send_groups(one_by_one(batch), self._send_one)

    def _send_one(self, group: Sequence[Outbound]) -> list[SendResult]:
        message = group[0]
        answer = self.client.post_json(self.path, data=self.form(message)) or {}
        return [SendResult(message.message_id, Outcome.SENT, provider_message_id=answer.get("sid"))]

    def form(self, message: Outbound) -> dict[str, str]:
        """The request's form fields; apart from sending, so benchmarks can time building alone."""
        sender = {"From": message.from_address} if message.from_address else self.sender
        form = {"To": message.to, "Body": message.text or "", **sender}
        if self.status_callback:
            form["StatusCallback"] = with_message_id(self.status_callback, message.message_id)
        return form
