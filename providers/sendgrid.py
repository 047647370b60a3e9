"""SendGrid (email): v3 `POST /v3/mail/send`, up to 1,000 personalizations per request.

In v3 the content (text, html) belongs to the request and each personalization to one
recipient (its own subject, headers and `custom_args`), so a batch becomes one request per
distinct content: a campaign with the same body for everyone goes out in one call, a batch
of personalised bodies in one call each. Attachments are content too: recipients of the
same files share one request. A Cc header is not passed on: SendGrid reserves it (and its
`cc` field would send to those addresses, which have messages of their own). The answer
is 202 with an `X-Message-Id` for the whole request: SendGrid accepted the mail, which says
nothing about delivery yet.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from email.utils import parseaddr
from typing import Any, ClassVar, Self

from providers.base import (
    MESSAGE_ID_TAG,
    Outbound,
    Outcome,
    PermanentError,
    ProviderError,
    SendResult,
    addresses,
    error_for_status,
    http_client,
    json_body,
    required,
    send_groups,
)
from providers.bounded import Answer

OFFENDER = re.compile(r"^personalizations\.(\d+)\.")


def classify(response: Answer) -> ProviderError:
    """SendGrid's errors carry no codes, only messages and fields: the HTTP status decides."""
    body = json_body(response)
    errors = body.get("errors") if isinstance(body, dict) else None
    if not errors:
        return error_for_status(response)
    detail = "; ".join(f"{e.get('field') or 'request'}: {e.get('message')}" for e in errors)
    return error_for_status(response, f"HTTP {response.status_code}: {detail}")


def offenders(error: PermanentError, size: int) -> set[int]:
    """The personalizations a 400 names: `personalizations.3.to.0.email` is the 4th."""
    body = json_body(error.response) if error.response is not None else None
    fields = [e.get("field") or "" for e in body.get("errors", [])] if isinstance(body, dict) else []
    return {int(m.group(1)) for f in fields if (m := OFFENDER.match(f)) and int(m.group(1)) < size}


def address(value: str) -> dict[str, str]:
    """SendGrid wants `{"email", "name"}` where others take `Name <email>`."""
    name, email = parseaddr(value)
    return {"email": email, "name": name} if name else {"email": email}


def content_groups(batch: Sequence[Outbound]) -> list[list[Outbound]]:
    """The batch cut into groups that share their content: one request each."""
    groups: dict[tuple, list[Outbound]] = defaultdict(list)
    for message in batch:
        key = (message.from_address, message.reply_to, message.text, message.html, tuple(message.attachments))
        groups[key].append(message)
    return list(groups.values())


class SendGridProvider:
    name: ClassVar[str] = "sendgrid"
    channels: ClassVar[frozenset[str]] = frozenset({"email"})
    max_batch: ClassVar[int] = 1000
    idempotent: bool = False  # SendGrid takes no idempotency key
    attachments: ClassVar[bool] = True
    account_settings: ClassVar[tuple[str, ...]] = ("SENDGRID_API_KEY", "EMAIL_FROM")

    def __init__(self, api_key: str, sender: str, env: Mapping[str, str]):
        self.sender = sender
        self.client = http_client(
            env, "SENDGRID", "https://api.sendgrid.com", classify, {"Authorization": f"Bearer {api_key}"}
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        return cls(required(env, "SENDGRID_API_KEY"), required(env, "EMAIL_FROM"), env)

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        return send_groups(content_groups(batch), self._send_group)

    def _send_group(self, group: Sequence[Outbound]) -> list[SendResult]:
        """One request for messages that share their content.

        A 400 that names some personalizations fails those messages alone, and the rest go
        again at once: one bad address must not fail a thousand good ones.
        """
        try:
            response = self.client.request("POST", "/v3/mail/send", json=self._request(group))
        except PermanentError as error:
            named = offenders(error, len(group))
            if not named or len(named) == len(group):
                raise
            failed = [SendResult.from_error(group[i].message_id, error) for i in sorted(named)]
            rest = [m for i, m in enumerate(group) if i not in named]
            return failed + self._send_group(rest)
        request_id = response.headers.get("X-Message-Id")
        return [SendResult(m.message_id, Outcome.SENT, provider_message_id=request_id) for m in group]

    def _request(self, group: Sequence[Outbound]) -> dict[str, Any]:
        first = group[0]
        content = [
            {"type": kind, "value": value}
            for kind, value in (("text/plain", first.text), ("text/html", first.html))
            if value is not None
        ]
        request: dict[str, Any] = {
            "personalizations": [self._personalization(m) for m in group],
            "from": address(first.from_address or self.sender),
            "content": content,
        }
        replies = [address(a) for a in addresses(first.reply_to or "")]
        if len(replies) == 1:
            request["reply_to"] = replies[0]
        elif replies:
            request["reply_to_list"] = replies  # SendGrid takes several only here
        if first.attachments:
            # Attachments belong to the request, so recipients of one file share one upload.
            request["attachments"] = [
                {"content": a.content, "type": a.content_type, "filename": a.filename, "disposition": "attachment"}
                for a in first.attachments
            ]
        return request

    @staticmethod
    def _personalization(message: Outbound) -> dict[str, Any]:
        personalization: dict[str, Any] = {
            "to": [{"email": message.to}],
            "subject": message.subject or "",
            # custom_args come back in SendGrid's event webhooks, so events find their message.
            "custom_args": {MESSAGE_ID_TAG: message.message_id},
        }
        if message.headers:
            personalization["headers"] = dict(message.headers)
        return personalization
