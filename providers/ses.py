"""Amazon SES v2 (email): `SendEmail`, `POST /v2/email/outbound-emails`, one message per call.

Requests are signed with botocore's SigV4 signer (install `tidings[ses]`), and sent through
our own HTTP client like every other adapter. Credentials come from AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN) when set, otherwise from botocore's usual chain
(shared config, instance or task role), refreshed as botocore refreshes them. Files go in
the simple message's `Attachments`, their base64 as `RawContent`, as stored.
"""

from __future__ import annotations

import json
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
    addresses,
    error_for_status,
    error_from_table,
    http_client,
    json_body,
    one_by_one,
    required,
    send_groups,
)
from providers.bounded import Answer

try:
    import botocore.session
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
except ImportError:  # the optional extra `tidings[ses]` is not installed
    Credentials = None  # type: ignore[assignment, misc]  # None: the extra is not installed

PATH = "/v2/email/outbound-emails"

# SendEmail's modelled errors, and the service-wide ones that matter here.
ERRORS: Mapping[str, type[ProviderError]] = {
    "TooManyRequestsException": RateLimited,
    "ThrottlingException": RateLimited,
    # A sending quota (e.g. the daily one) is reached: retrying before it resets is useless.
    "LimitExceededException": ConfigurationError,
    "SendingPausedException": ConfigurationError,
    "AccountSuspendedException": ConfigurationError,
    "MailFromDomainNotVerifiedException": ConfigurationError,
    "NotFoundException": ConfigurationError,  # e.g. the configuration set
    "MessageRejected": PermanentError,
    "BadRequestException": PermanentError,
    "UnrecognizedClientException": ConfigurationError,
    "InvalidSignatureException": ConfigurationError,
    "ExpiredTokenException": ConfigurationError,
    "AccessDeniedException": ConfigurationError,
}


def classify(response: Answer) -> ProviderError:
    """Read the error type as botocore does: the `x-amzn-ErrorType` header, else the body."""
    body = json_body(response)
    body = body if isinstance(body, dict) else {}
    kind = response.headers.get("x-amzn-ErrorType", "").split(":")[0]
    kind = kind or str(body.get("__type") or body.get("code") or "").split("#")[-1]
    message = body.get("message") or body.get("Message") or response.excerpt(300)
    if not kind:
        return error_for_status(response)
    detail = f"SES {kind}: {message}"
    # In the sandbox, sending to an unverified address is an account matter, not the message's.
    if kind == "MessageRejected" and "not verified" in str(message):
        return ConfigurationError(detail)
    return error_from_table(ERRORS, kind, detail, response)


def credentials(env: Mapping[str, str]) -> Credentials:
    """Credentials from the settings, else from botocore's chain (which refreshes them)."""
    if Credentials is None:
        raise ValueError("the ses provider needs boto3: pip install 'tidings[ses]'")
    if env.get("AWS_ACCESS_KEY_ID", "").strip():
        return Credentials(
            required(env, "AWS_ACCESS_KEY_ID"),
            required(env, "AWS_SECRET_ACCESS_KEY"),
            env.get("AWS_SESSION_TOKEN") or None,
        )
    found = botocore.session.get_session().get_credentials()
    if found is None:
        raise ValueError("AWS_ACCESS_KEY_ID is not set (and botocore found no other AWS credentials)")
    return found


class SesProvider:
    name: ClassVar[str] = "ses"
    channels: ClassVar[frozenset[str]] = frozenset({"email"})
    max_batch: ClassVar[int] = 1
    idempotent: bool = False  # SES takes no idempotency key
    attachments: ClassVar[bool] = True
    account_settings: ClassVar[tuple[str, ...]] = (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "SES_REGION",
        "SES_CONFIGURATION_SET",
        "EMAIL_FROM",
    )

    def __init__(self, env: Mapping[str, str]):
        # SES_REGION, else the region the rest of the AWS tooling uses.
        self.region = env.get("SES_REGION", "").strip() or env.get("AWS_REGION", "").strip()
        if not self.region:
            raise ValueError("SES_REGION is not set")
        self.sender = required(env, "EMAIL_FROM")
        self.configuration_set = env.get("SES_CONFIGURATION_SET", "").strip() or None
        self.credentials = credentials(env)
        self.client = http_client(env, "SES", f"https://email.{self.region}.amazonaws.com", classify)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        return cls(env)

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        return send_groups(one_by_one(batch), self._send_one)

    def _send_one(self, group: Sequence[Outbound]) -> list[SendResult]:
        message = group[0]
        answer = self.client.post_json(PATH, **self._signed(self._request(message))) or {}
        return [SendResult(message.message_id, Outcome.SENT, provider_message_id=answer.get("MessageId"))]

    def _signed(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The body and headers of a SigV4-signed request (signed anew each time: it expires).

        Frozen credentials, as botocore does, so a refresh cannot happen halfway through signing.
        """
        body = json.dumps(payload).encode()
        request = AWSRequest(
            "POST", self.client.base_url + PATH, data=body, headers={"Content-Type": "application/json"}
        )
        SigV4Auth(self.credentials.get_frozen_credentials(), "ses", self.region).add_auth(request)
        return {"data": body, "headers": dict(request.headers.items())}

    def _request(self, message: Outbound) -> dict[str, Any]:
        body = {
            kind: {"Data": value, "Charset": "UTF-8"}
            for kind, value in (("Text", message.text), ("Html", message.html))
            if value is not None
        }
        simple: dict[str, Any] = {
            "Subject": {"Data": message.subject or "", "Charset": "UTF-8"},
            "Body": body,
        }
        if message.headers:
            simple["Headers"] = [{"Name": k, "Value": v} for k, v in message.headers.items()]
        if message.attachments:
            simple["Attachments"] = [
                {
                    "FileName": a.filename,
                    "ContentType": a.content_type,
                    "RawContent": a.content,
                    "ContentDisposition": "ATTACHMENT",
                    "ContentTransferEncoding": "BASE64",
                }
                for a in message.attachments
            ]
        request: dict[str, Any] = {
            "FromEmailAddress": message.from_address or self.sender,
            "Destination": {"ToAddresses": [message.to]},
            "Content": {"Simple": simple},
            # A tag carries our id into SES event publishing, so events find their message.
            "EmailTags": [{"Name": MESSAGE_ID_TAG, "Value": message.message_id}],
        }
        if message.reply_to:
            request["ReplyToAddresses"] = addresses(message.reply_to)
        if self.configuration_set:
            request["ConfigurationSetName"] = self.configuration_set
        return request
