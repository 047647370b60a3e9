"""Firebase Cloud Messaging (push): HTTP v1 `POST /v1/projects/{project}/messages:send`.

Authenticated with a service account's OAuth2 token (install `tidings[fcm]`): google-auth's
AuthorizedSession signs the JWT, exchanges it at the account's `token_uri`, refreshes the
token before it expires and once more on a 401, so this module only builds the message
and maps FCM's error codes. `UNREGISTERED` means the app was uninstalled: the token is
dead, and the engine removes it from its subscriber.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from providers.base import (
    ConfigurationError,
    HttpClient,
    InvalidToken,
    Outbound,
    Outcome,
    PermanentError,
    ProviderError,
    RateLimited,
    SendResult,
    TransientError,
    error_for_status,
    error_from_table,
    json_body,
    number,
    one_by_one,
    required,
    send_groups,
)
from providers.bounded import Answer

try:
    from google.auth import exceptions as google_errors
    from google.auth.transport.requests import AuthorizedSession
    from google.oauth2 import service_account
except ImportError:  # the optional extra `tidings[fcm]` is not installed
    service_account = None  # type: ignore[assignment]  # None: the extra is not installed

SCOPE = "https://www.googleapis.com/auth/firebase.messaging"

# FcmError codes (firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode).
ERRORS: Mapping[str, type[ProviderError]] = {
    "UNREGISTERED": InvalidToken,
    "INVALID_ARGUMENT": PermanentError,
    # The token belongs to another Firebase project: likely our own misconfiguration, so the
    # token is kept (a wrong project must not wipe every subscriber's tokens).
    "SENDER_ID_MISMATCH": PermanentError,
    "QUOTA_EXCEEDED": RateLimited,
    "UNAVAILABLE": TransientError,
    "INTERNAL": TransientError,
    "THIRD_PARTY_AUTH_ERROR": ConfigurationError,  # APNs certificate or web push key rejected
}


def classify(response: Answer) -> ProviderError:
    """FCM's code is in `error.details[].errorCode`; without one, the HTTP status decides."""
    body = json_body(response)
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return error_for_status(response)
    codes = [d.get("errorCode") for d in error.get("details", []) if isinstance(d, dict)]
    code = next((c for c in codes if c), error.get("status"))
    return error_from_table(ERRORS, code, f"FCM {code}: {error.get('message')}", response)


def string_values(data: Mapping[str, Any]) -> dict[str, str]:
    """FCM's `data` is a map of strings: anything else travels as JSON text."""
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in data.items()}


def service_account_info(env: Mapping[str, str]) -> dict[str, Any]:
    """The key as text (a project's own account, stored with its settings) or as a file."""
    text = env.get("FCM_CREDENTIALS_JSON", "").strip()
    if text:
        try:
            account = json.loads(text)
        except ValueError as error:
            raise ValueError(f"FCM_CREDENTIALS_JSON is not JSON: {error}") from None
        if not isinstance(account, dict):
            raise ValueError("FCM_CREDENTIALS_JSON must be a service account's JSON object")
        return account
    path = required(env, "FCM_CREDENTIALS")
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError) as error:
        raise ValueError(f"FCM_CREDENTIALS: cannot read a service account from {path}: {error}") from None


class FcmProvider:
    name: ClassVar[str] = "fcm"
    channels: ClassVar[frozenset[str]] = frozenset({"push"})
    max_batch: ClassVar[int] = 1
    idempotent: bool = False  # FCM v1 has no idempotency key
    # A project brings its service account as JSON text: FCM_CREDENTIALS is a path on the worker.
    account_settings: ClassVar[tuple[str, ...]] = ("FCM_CREDENTIALS_JSON", "FCM_PROJECT_ID")

    def __init__(self, account: Mapping[str, Any], project_id: str, env: Mapping[str, str]):
        credentials = service_account.Credentials.from_service_account_info(account, scopes=[SCOPE])
        base_url = env.get("FCM_BASE_URL", "").strip() or "https://fcm.googleapis.com"
        self.path = f"/v1/projects/{project_id}/messages:send"
        self.client = HttpClient(
            base_url,
            timeout=number(env, "FCM_TIMEOUT", 10.0),
            classify=classify,
            session=AuthorizedSession(credentials),
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        """The service account's JSON key: the file FCM_CREDENTIALS names, or the text of
        FCM_CREDENTIALS_JSON; FCM_PROJECT_ID overrides its project."""
        if service_account is None:
            raise ValueError("the fcm provider needs google-auth: pip install 'tidings[fcm]'")
        account = service_account_info(env)
        project_id = env.get("FCM_PROJECT_ID", "").strip() or account.get("project_id")
        if not project_id:
            raise ValueError("FCM_PROJECT_ID is not set (and the service account names no project_id)")
        try:
            return cls(account, project_id, env)
        except ValueError as error:
            raise ValueError(f"FCM_CREDENTIALS: {error}") from None

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        return send_groups(one_by_one(batch), self._send_one)

    def _send_one(self, group: Sequence[Outbound]) -> list[SendResult]:
        message = group[0]
        try:
            answer = self.client.post_json(self.path, {"message": self._message(message)})
        except google_errors.RefreshError as error:
            # The token endpoint refused our key (revoked, deleted, clock skew): a person must act.
            if getattr(error, "retryable", False):
                raise TransientError(f"OAuth2 token refresh failed: {error}") from error
            raise ConfigurationError(f"OAuth2 token refresh failed: {error}") from error
        except google_errors.TransportError as error:
            raise TransientError(f"OAuth2 token endpoint unreachable: {error}") from error
        return [SendResult(message.message_id, Outcome.SENT, provider_message_id=(answer or {}).get("name"))]

    @staticmethod
    def _message(message: Outbound) -> dict[str, Any]:
        fcm: dict[str, Any] = {"token": message.to}
        notification = {"title": message.subject, "body": message.text}
        if any(notification.values()):
            fcm["notification"] = {key: value for key, value in notification.items() if value}
        if message.data:
            fcm["data"] = string_values(message.data)
        return fcm
