"""Provider payload building: what each adapter spends turning messages into its request,
without the call. Every benchmark builds for the same 100 rendered messages: one request
of a batch API (Resend, Postmark, SendGrid per distinct content, fake), or the 100
requests of an adapter that sends one message per call. JSON bodies are serialised as
requests serialises `json=`, so the figure is the bytes that would go on the wire.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlencode

import samples

from providers import fake, registry
from providers.base import Outbound
from providers.fcm import FcmProvider
from providers.sendgrid import content_groups
from providers.webhook import request_body

# Settings that make each adapter buildable; nothing is ever sent with them.
ENV = {
    "EMAIL_FROM": "Shop Example <orders@shop.example.com>",
    "RESEND_API_KEY": "re_benchmark",
    "POSTMARK_SERVER_TOKEN": "postmark-benchmark",
    "SENDGRID_API_KEY": "SG.benchmark",
    "AWS_ACCESS_KEY_ID": "AKIABENCHMARK000000",
    "AWS_SECRET_ACCESS_KEY": "benchmark-secret-access-key-0000000000000",
    "SES_REGION": "eu-west-1",
    "SMTP_HOST": "127.0.0.1",
    "TWILIO_ACCOUNT_SID": "AC00000000000000000000000000000000",
    "TWILIO_AUTH_TOKEN": "benchmark",
    "TWILIO_FROM": "+15005550006",
    "WEBHOOK_SIGNING_SECRET": "whsec_YmVuY2htYXJrLXNpZ25pbmcta2V5LTAwMDA=",
}


def as_json(value: Any) -> bytes:
    """A body as requests encodes `json=`."""
    return json.dumps(value, allow_nan=False).encode()


def time_building(
    benchmark,
    batch: Sequence[Outbound],
    build: Callable[[Sequence[Outbound]], Any],
    mark: Callable[[Outbound], str] = lambda m: m.message_id,
) -> None:
    """Time `build` on the batch, and check every message made it in: its `mark` (our id,
    or its address where the provider is not told our id) is in what was built."""
    benchmark.extra_info["items"] = len(batch)
    built = repr(benchmark(build, batch))
    assert all(mark(m) in built for m in batch)


def test_payload_resend(benchmark):
    adapter = registry.build("resend", ENV)
    time_building(benchmark, samples.emails(), lambda batch: as_json([adapter._email(m) for m in batch]))


def test_payload_postmark(benchmark):
    adapter = registry.build("postmark", ENV)
    time_building(benchmark, samples.emails(), lambda batch: as_json([adapter._email(m) for m in batch]))


def test_payload_sendgrid(benchmark):
    """Personalised bodies differ per recipient, so SendGrid makes one request per message here."""
    adapter = registry.build("sendgrid", ENV)
    time_building(
        benchmark, samples.emails(), lambda batch: [as_json(adapter._request(g)) for g in content_groups(batch)]
    )


def test_payload_ses(benchmark):
    """SES signs every request (SigV4) as it builds it: part of the cost."""
    adapter = registry.build("ses", ENV)
    time_building(benchmark, samples.emails(), lambda batch: [adapter._signed(adapter._request(m)) for m in batch])


def test_payload_smtp(benchmark):
    """MIME building and serialising; the connection is the batch's, and not opened here."""
    adapter = registry.build("smtp", ENV)
    time_building(benchmark, samples.emails(), lambda batch: [adapter.mime(m).as_bytes() for m in batch])


def test_payload_fake(benchmark):
    time_building(benchmark, samples.emails(), lambda batch: as_json(fake.payload(batch)))


def test_payload_twilio(benchmark):
    adapter = registry.build("twilio", ENV)
    time_building(
        benchmark,
        samples.sms(),
        lambda batch: [urlencode(adapter.form(m)) for m in batch],
        mark=lambda m: urlencode({"To": m.to}),
    )


def test_payload_fcm(benchmark):
    """The message body only: the OAuth2 token is the session's, fetched once an hour."""
    time_building(
        benchmark,
        samples.pushes(),
        lambda batch: [as_json({"message": FcmProvider._message(m)}) for m in batch],
        mark=lambda m: m.to,
    )


def test_payload_webhook(benchmark):
    """The compact JSON body and its Standard Webhooks signature headers."""
    adapter = registry.build("webhook", ENV)

    def build(batch: Sequence[Outbound]) -> list[tuple[str, dict[str, str]]]:
        return [(body, adapter.headers(m, body)) for m in batch for body in [request_body(m)]]

    time_building(benchmark, samples.webhooks(), build)
