"""SES v2 SendEmail against a local server: a SigV4-signed JSON request, SES's error types."""

from __future__ import annotations

import json
import re

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from providers.base import ConfigurationError, Outcome, PermanentError, RateLimited
from providers.ses import SesProvider
from tests.providers.helpers import FILES, email

PATH = "/v2/email/outbound-emails"
SETTINGS = {
    "SES_REGION": "eu-west-1",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "EMAIL_FROM": "Acme <hello@acme.test>",
}
SIGV4 = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/\d{8}/eu-west-1/ses/aws4_request, "
    r"SignedHeaders=([a-z0-9;-]+), Signature=[0-9a-f]{64}$"
)


@pytest.fixture
def adapter(httpserver: HTTPServer) -> SesProvider:
    return SesProvider.from_env({**SETTINGS, "SES_BASE_URL": httpserver.url_for("")})


def ses_error(kind: str, status: int = 400, message: str = "details") -> Response:
    """How SES v2 answers an error: the type in x-amzn-ErrorType, the message in the body."""
    return Response(
        json.dumps({"message": message}),
        status,
        headers={"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazonaws.sesv2/"},
        content_type="application/json",
    )


def test_send_email_is_a_signed_json_post(httpserver, adapter):
    seen: list[Request] = []

    def answer(request: Request) -> Response:
        seen.append(request)
        return Response(json.dumps({"MessageId": "0102018f-example-000000"}), 200, content_type="application/json")

    httpserver.expect_request(PATH, method="POST").respond_with_handler(answer)
    message = email(1, reply_to="help@acme.test", headers={"List-Unsubscribe": "<https://acme.test/u/1>"})
    [result] = adapter.send([message])
    assert (result.outcome, result.provider_message_id) == (Outcome.SENT, "0102018f-example-000000")
    request = seen[0]
    signed = SIGV4.match(request.headers["Authorization"])
    assert signed, request.headers["Authorization"]
    assert {"host", "x-amz-date", "content-type"} <= set(signed.group(1).split(";"))
    assert re.fullmatch(r"\d{8}T\d{6}Z", request.headers["X-Amz-Date"])
    assert request.get_json() == {
        "FromEmailAddress": "Acme <hello@acme.test>",
        "Destination": {"ToAddresses": ["user1@example.com"]},
        "ReplyToAddresses": ["help@acme.test"],
        "Content": {
            "Simple": {
                "Subject": {"Data": "Hello 1", "Charset": "UTF-8"},
                "Body": {
                    "Text": {"Data": "Hi there", "Charset": "UTF-8"},
                    "Html": {"Data": "<p>Hi there</p>", "Charset": "UTF-8"},
                },
                "Headers": [{"Name": "List-Unsubscribe", "Value": "<https://acme.test/u/1>"}],
            }
        },
        "EmailTags": [{"Name": "tidings_message_id", "Value": "m1"}],
    }


def test_a_session_token_is_signed_too(httpserver):
    adapter = SesProvider.from_env(
        {**SETTINGS, "AWS_SESSION_TOKEN": "session-token", "SES_BASE_URL": httpserver.url_for("")}
    )
    httpserver.expect_request(PATH).respond_with_json({"MessageId": "x"})
    adapter.send([email(1)])
    request = httpserver.log[0][0]
    assert request.headers["X-Amz-Security-Token"] == "session-token"
    assert "x-amz-security-token" in SIGV4.match(request.headers["Authorization"]).group(1)


def test_the_configuration_set_is_named_when_set(httpserver):
    adapter = SesProvider.from_env(
        {**SETTINGS, "SES_CONFIGURATION_SET": "tidings", "SES_BASE_URL": httpserver.url_for("")}
    )
    httpserver.expect_request(PATH).respond_with_json({"MessageId": "x"})
    adapter.send([email(1)])
    assert httpserver.log[0][0].get_json()["ConfigurationSetName"] == "tidings"


@pytest.mark.parametrize(
    ("kind", "status", "message", "expected"),
    [
        ("SendingPausedException", 400, "Sending is paused for this account.", ConfigurationError),
        ("AccountSuspendedException", 400, "details", ConfigurationError),
        ("MailFromDomainNotVerifiedException", 400, "details", ConfigurationError),
        ("LimitExceededException", 400, "Daily message quota exceeded.", ConfigurationError),
        (
            "UnrecognizedClientException",
            403,
            "The security token included in the request is invalid.",
            ConfigurationError,
        ),
        (
            "MessageRejected",
            400,
            "Email address is not verified. The following identities failed the check in region EU-WEST-1: x",
            ConfigurationError,
        ),
        ("TooManyRequestsException", 429, "Maximum sending rate exceeded.", RateLimited),
        ("MessageRejected", 400, "Message content rejected.", PermanentError),
        ("BadRequestException", 400, "Missing final '@domain'", PermanentError),
    ],
)
def test_error_types(httpserver, adapter, kind, status, message, expected):
    httpserver.expect_request(PATH).respond_with_response(ses_error(kind, status, message))
    if expected.provider_wide:
        with pytest.raises(expected, match=kind):
            adapter.send([email(1)])
        return
    [result] = adapter.send([email(1)])
    assert (result.outcome, result.error) == (expected.outcome, f"SES {kind}: {message}")


def test_the_error_type_may_come_in_the_body(httpserver, adapter):
    httpserver.expect_request(PATH).respond_with_json(
        {"__type": "com.amazonaws.sesv2#SendingPausedException", "message": "paused"}, status=400
    )
    with pytest.raises(ConfigurationError, match="SendingPausedException"):
        adapter.send([email(1)])


def test_one_message_per_call():
    assert SesProvider.max_batch == 1


@pytest.mark.parametrize("missing", ["SES_REGION", "EMAIL_FROM", "AWS_SECRET_ACCESS_KEY"])
def test_settings(missing):
    with pytest.raises(ValueError, match=f"{missing} is not set"):
        SesProvider.from_env({k: v for k, v in SETTINGS.items() if k != missing})


def test_files_and_several_reply_to_addresses_go_in_sess_form(httpserver, adapter):
    seen: list[dict] = []

    def answer(request: Request) -> Response:
        seen.append(request.get_json())
        return Response(json.dumps({"MessageId": "0102018f-example-000001"}), 200, content_type="application/json")

    httpserver.expect_request(PATH, method="POST").respond_with_handler(answer)
    message = email(1, attachments=FILES, reply_to='help@acme.test, "Acme, Orders" <orders@acme.test>')
    [result] = adapter.send([message])
    assert result.outcome is Outcome.SENT
    [request] = seen
    assert request["ReplyToAddresses"] == ["help@acme.test", '"Acme, Orders" <orders@acme.test>']
    assert request["Content"]["Simple"]["Attachments"] == [
        {
            "FileName": "invoice.pdf",
            "ContentType": "application/pdf",
            "RawContent": "JVBERi0xLjQK",
            "ContentDisposition": "ATTACHMENT",
            "ContentTransferEncoding": "BASE64",
        }
    ]
