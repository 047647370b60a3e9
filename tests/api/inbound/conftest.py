"""An API whose settings receive every provider's status webhooks, and the providers' side:
keys generated here, each request signed the way its provider documents it.

The signers below are written from the providers' documentation, not from our receivers,
so a test fails when the two disagree.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID
from flask import Flask
from flask.testing import FlaskClient
from pytest_httpserver import HTTPServer
from sqlalchemy import text
from standardwebhooks.webhooks import Webhook

from app.api import create_app
from app.config import Settings
from tasks.celery_app import configure

PUBLIC_URL = "https://tidings.example.com"
RESEND_SECRET = "whsec_" + base64.b64encode(b"resend signing key, 32 bytes...!").decode()
POSTMARK_USER, POSTMARK_PASSWORD = "postmark", "hook-password-9f2c"
TWILIO_TOKEN = "twilio-auth-token-0123456789"
TOPIC = "arn:aws:sns:eu-west-1:123456789012:tidings-ses-events"


@pytest.fixture(scope="session")
def sendgrid_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="session")
def sns_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="session")
def sns_host(sns_key) -> HTTPServer:
    """Stands in for sns.<region>.amazonaws.com: the signing certificate, and the URL a
    subscription is confirmed at. Allowed only through SES_SNS_TEST_HOST."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(sns_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .sign(sns_key, hashes.SHA256())
    )
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    server.expect_request("/SimpleNotificationService-test.pem").respond_with_data(
        certificate.public_bytes(serialization.Encoding.PEM), content_type="application/x-pem-file"
    )
    server.expect_request("/confirm").respond_with_data("<ConfirmSubscriptionResponse/>")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def inbound_settings(migrated: Settings, sendgrid_key, sns_host) -> Settings:
    public = sendgrid_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return Settings.from_env(
        {
            **migrated.environ,
            "TIDINGS_PUBLIC_URL": PUBLIC_URL,
            # Resend is in the email chain too, so a project may bring its own Resend account.
            "EMAIL_PROVIDER": "fake,fake2,resend",
            "RESEND_API_KEY": "re_deployment",
            "EMAIL_FROM": "hello@acme.test",
            "RESEND_WEBHOOK_SECRET": RESEND_SECRET,
            "POSTMARK_WEBHOOK_USERNAME": POSTMARK_USER,
            "POSTMARK_WEBHOOK_PASSWORD": POSTMARK_PASSWORD,
            "SENDGRID_WEBHOOK_PUBLIC_KEY": base64.b64encode(public).decode(),
            "TWILIO_AUTH_TOKEN": TWILIO_TOKEN,
            "SES_SNS_TOPIC_ARNS": TOPIC,
            "SES_SNS_TEST_HOST": sns_host.url_for("").removeprefix("http://").rstrip("/"),
        }
    )


@pytest.fixture(scope="session")
def inbound_app(inbound_settings: Settings, migrated: Settings) -> Flask:
    app = create_app(inbound_settings)
    configure(migrated)  # the pipeline keeps the suite's settings
    return app


@pytest.fixture
def inbound(inbound_app: Flask, client: FlaskClient) -> FlaskClient:
    """A client of the API that receives webhooks (after `client` reset the shared state)."""
    return inbound_app.test_client()


def sent(
    project, engine, provider: str, provider_message_id: str | None, body: dict[str, Any], status: str = "sent"
) -> str:
    """A message as if `provider` had taken it: sent, with the provider's id for it."""
    message_id = project.send({**body, "scheduled_at": "2099-01-01T00:00:00Z"}).get_json()["id"]
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = :status, provider = :provider, provider_message_id = :pmid, "
                "sent_at = CASE WHEN :status = 'sent' THEN now() END, attempts = 1 WHERE id = :id"
            ),
            {"status": status, "provider": provider, "pmid": provider_message_id, "id": message_id},
        )
    return message_id


def left_unknown(project, engine, provider: str, body: dict[str, Any]) -> str:
    """A message whose worker stopped during the call to `provider`, as the sweeper leaves it:
    `unknown`, the provider's id for it never read."""
    return sent(project, engine, provider, None, body, status="unknown")


def resolved(project, message_id: str) -> tuple[str, str | None, list[tuple[str, str | None]]]:
    """Status, provider's id, and each provider event with what it says it resolved."""
    message = project.get(message_id).get_json()
    events = [(e["type"], e["data"].get("resolved")) for e in inbound_events(project, message_id)]
    return message["status"], message["provider_message_id"], events


def inbound_events(project, message_id: str) -> list[dict]:
    derived = {"accepted", "scheduled", "ready", "sending", "sent"}
    return [e for e in project.get(message_id).get_json()["events"] if e["type"] not in derived]


def suppressions(project) -> list[tuple[str, str, str]]:
    items = project.call("GET", "/v1/suppressions").get_json()["items"]
    return [(s["channel"], s["address"], s["reason"]) for s in items]


# -- the providers' signers --------------------------------------------------------------


def resend_headers(
    body: bytes, event_id: str | None = None, at: float | None = None, secret: str = RESEND_SECRET
) -> dict[str, str]:
    """Signed by the standardwebhooks package, as Svix signs for Resend."""
    event_id = event_id or f"msg_{uuid.uuid4().hex}"
    when = datetime.fromtimestamp(at or time.time(), UTC)
    signature = Webhook(secret).sign(event_id, when, body.decode())
    return {
        "svix-id": event_id,
        "svix-timestamp": str(int(when.timestamp())),
        "svix-signature": signature,
        "Content-Type": "application/json",
    }


def postmark_headers(user: str = POSTMARK_USER, password: str = POSTMARK_PASSWORD) -> dict[str, str]:
    credentials = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {credentials}", "Content-Type": "application/json"}


def sendgrid_headers(key: ec.EllipticCurvePrivateKey, body: bytes, at: float | None = None) -> dict[str, str]:
    """ECDSA P-256 with SHA-256 over the timestamp followed by the body, base64 DER."""
    timestamp = str(int(at or time.time()))
    signature = key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
    return {
        "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
        "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
        "Content-Type": "application/json",
    }


def twilio_signature(url: str, form: dict[str, str], token: str = TWILIO_TOKEN) -> str:
    """Twilio's documented algorithm: the URL, then each POST parameter's name and value
    sorted by name, HMAC-SHA1 under the auth token, base64."""
    signed = url + "".join(f"{name}{form[name]}" for name in sorted(form))
    return base64.b64encode(hmac.new(token.encode(), signed.encode(), hashlib.sha1).digest()).decode()


# The fields SNS signs per message type, in order (AWS, "Verifying the signatures of Amazon
# SNS messages"); Subject only when present.
SNS_SIGNED = {
    "Notification": ["Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"],
    "SubscriptionConfirmation": ["Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"],
}


def sns_message(
    key: rsa.RSAPrivateKey,
    cert_url: str,
    kind: str,
    message: str,
    topic: str = TOPIC,
    at: datetime | None = None,
    message_id: str | None = None,
    **extra: str,
) -> dict[str, str]:
    """An SNS message signed with signature version 2 (RSA, SHA-256)."""
    sns = {
        "Type": kind,
        "MessageId": message_id or str(uuid.uuid4()),
        "TopicArn": topic,
        "Message": message,
        "Timestamp": (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "SignatureVersion": "2",
        "SigningCertURL": cert_url,
        **extra,
    }
    signed = "".join(f"{name}\n{sns[name]}\n" for name in SNS_SIGNED[kind] if name in sns)
    sns["Signature"] = base64.b64encode(key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())).decode()
    return sns


def as_body(value: Any) -> bytes:
    return json.dumps(value).encode()
