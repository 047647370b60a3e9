"""The rules of an email's extras that need no database: verified senders, the sender shown, copies."""

from __future__ import annotations

import pytest

from app.enums import Channel
from app.services.email_extras import copies, files_refusal, is_verified, providers_for_email, shown, without_files

ENTRIES = {"@acme.example", "ceo@other.example"}


@pytest.mark.parametrize(
    ("address", "verified"),
    [
        ("billing@acme.example", True),
        ("Billing@ACME.Example", True),
        ("ceo@other.example", True),
        ("cfo@other.example", False),
        ("billing@mail.acme.example", False),  # a domain entry is that domain, not its subdomains
        ("billing@acme.example.evil", False),
        ("acme.example@evil.example", False),
    ],
)
def test_an_address_is_verified_by_itself_or_by_its_domain(address, verified):
    assert is_verified(address, ENTRIES) is verified


@pytest.mark.parametrize(
    ("sender", "expected"),
    [
        ({"email": "billing@acme.example"}, "billing@acme.example"),
        ({"email": "billing@acme.example", "name": "Acme Billing"}, "Acme Billing <billing@acme.example>"),
        ({"email": "billing@acme.example", "name": "Acme, Billing"}, '"Acme, Billing" <billing@acme.example>'),
        ({"email": "b@acme.example", "name": 'Say "hi"'}, '"Say \\"hi\\"" <b@acme.example>'),
        ({"email": "b@acme.example", "name": "Zoë"}, "Zoë <b@acme.example>"),
    ],
)
def test_the_sender_is_shown_quoted_where_needed_never_encoded(sender, expected):
    assert shown(sender) == expected


def test_copies_are_each_address_once_and_never_the_recipients_own():
    data = {"cc": ["Bo@Example.com", "ada@example.com"], "bcc": ["bo@example.com", "cy@example.com"]}
    assert copies(data, "ada@example.com") == [("bo@example.com", "cc"), ("cy@example.com", "bcc")]
    assert copies({}, "ada@example.com") == []


def test_a_test_key_reaches_log_alone_a_live_key_the_whole_chain():
    chains = {Channel.EMAIL: ("postmark", "ses", "fake")}
    assert providers_for_email(chains, test=True) == ("log",)
    assert without_files(providers_for_email(chains, test=True)) == []
    assert without_files(providers_for_email(chains, test=False)) == ["fake"]
    assert files_refusal(["fake"]) == "the fake provider does not send attachments"
    assert files_refusal(["fake", "fake2"]) == "the fake, fake2 providers do not send attachments"
