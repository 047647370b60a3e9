"""FCM HTTP v1 against a local server: the OAuth2 JWT-bearer exchange, the send, FCM's errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from providers.base import ConfigurationError, Outbound, Outcome, PermanentError, RateLimited, TransientError
from providers.fcm import FcmProvider
from tests.fcm_server import PROJECT, SEND, TOKEN, fcm_error, serve_tokens, service_account


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def account(key, httpserver: HTTPServer, tmp_path: Path) -> dict:
    account = service_account(key, httpserver)
    (tmp_path / "service-account.json").write_text(json.dumps(account))
    return account


@pytest.fixture
def token_requests(key, account, httpserver: HTTPServer) -> list[dict]:
    return serve_tokens(key, httpserver)


@pytest.fixture
def adapter(account, httpserver: HTTPServer, tmp_path: Path) -> FcmProvider:
    return FcmProvider.from_env(
        {"FCM_CREDENTIALS": str(tmp_path / "service-account.json"), "FCM_BASE_URL": httpserver.url_for("")}
    )


def push(n: int = 1, **fields) -> Outbound:
    return Outbound(f"m{n}", "push", f"device-token-{n}", "Your order", "It is on its way", None, **fields)


def test_the_service_account_token_is_fetched_once_and_sent_as_bearer(httpserver, adapter, token_requests, account):
    sends: list[Request] = []

    def answer(request: Request) -> Response:
        sends.append(request)
        name = f"projects/{PROJECT}/messages/0:{len(sends)}"
        return Response(json.dumps({"name": name}), 200, content_type="application/json")

    httpserver.expect_request(SEND, method="POST").respond_with_handler(answer)
    first = adapter.send([push(1, data={"order": 17, "status": "shipped"})])
    second = adapter.send([push(2)])
    assert [(r.outcome, r.provider_message_id) for r in first + second] == [
        (Outcome.SENT, f"projects/{PROJECT}/messages/0:1"),
        (Outcome.SENT, f"projects/{PROJECT}/messages/0:2"),
    ]
    [claims] = token_requests  # one exchange serves both sends
    assert claims["iss"] == account["client_email"]
    assert claims["scope"] == "https://www.googleapis.com/auth/firebase.messaging"
    assert {r.headers["Authorization"] for r in sends} == {f"Bearer {TOKEN}"}
    assert sends[0].get_json() == {
        "message": {
            "token": "device-token-1",
            "notification": {"title": "Your order", "body": "It is on its way"},
            "data": {"order": "17", "status": "shipped"},  # FCM data values are strings
        }
    }


@pytest.mark.parametrize(
    ("status", "code", "fcm_code", "kind", "invalid_token"),
    [
        (404, "NOT_FOUND", "UNREGISTERED", PermanentError, True),
        (400, "INVALID_ARGUMENT", "INVALID_ARGUMENT", PermanentError, False),
        (403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH", PermanentError, False),
        (503, "UNAVAILABLE", "UNAVAILABLE", TransientError, False),
        (500, "INTERNAL", "INTERNAL", TransientError, False),
        (429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED", RateLimited, False),
        (401, "UNAUTHENTICATED", "THIRD_PARTY_AUTH_ERROR", ConfigurationError, False),
        (403, "PERMISSION_DENIED", None, ConfigurationError, False),  # no FcmError: the status decides
    ],
)
def test_error_codes(httpserver, adapter, token_requests, status, code, fcm_code, kind, invalid_token):
    httpserver.expect_request(SEND).respond_with_response(fcm_error(status, code, fcm_code))
    if kind.provider_wide:
        with pytest.raises(kind, match=f"FCM {fcm_code or code}"):
            adapter.send([push()])
        return
    [result] = adapter.send([push()])
    assert (result.outcome, result.invalid_token) == (kind.outcome, invalid_token)


def test_quota_exceeded_waits_for_retry_after(httpserver, adapter, token_requests):
    answer = fcm_error(429, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED")
    answer.headers["Retry-After"] = "60"
    httpserver.expect_request(SEND).respond_with_response(answer)
    with pytest.raises(RateLimited) as raised:
        adapter.send([push()])
    assert raised.value.retry_after == 60.0


def test_a_refused_token_exchange_is_a_configuration_error(httpserver, adapter, account):
    httpserver.expect_request("/token").respond_with_json(
        {"error": "invalid_grant", "error_description": "Invalid JWT Signature."}, status=400
    )
    with pytest.raises(ConfigurationError, match="invalid_grant"):
        adapter.send([push()])


def test_one_message_per_call():
    assert FcmProvider.max_batch == 1


def test_the_service_account_may_come_as_json_text(httpserver, account, token_requests):
    """How a project brings its own FCM account: the key itself, not a path on the worker."""
    httpserver.expect_request(SEND, method="POST").respond_with_json({"name": "projects/x/messages/1"})
    adapter = FcmProvider.from_env(
        {"FCM_CREDENTIALS_JSON": json.dumps(account), "FCM_BASE_URL": httpserver.url_for("")}
    )
    [result] = adapter.send([push()])
    assert result.outcome is Outcome.SENT
    assert len(token_requests) == 1


def test_settings(tmp_path):
    with pytest.raises(ValueError, match="FCM_CREDENTIALS is not set"):
        FcmProvider.from_env({})
    with pytest.raises(ValueError, match="FCM_CREDENTIALS_JSON is not JSON"):
        FcmProvider.from_env({"FCM_CREDENTIALS_JSON": "{not json"})
    with pytest.raises(ValueError, match="must be a service account's JSON object"):
        FcmProvider.from_env({"FCM_CREDENTIALS_JSON": "[1, 2]"})
    with pytest.raises(ValueError, match="FCM_CREDENTIALS: cannot read a service account"):
        FcmProvider.from_env({"FCM_CREDENTIALS": str(tmp_path / "missing.json")})
