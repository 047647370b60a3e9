"""What the engine tells every adapter beyond its settings: where its account's status
webhooks reach us, for providers that take a status callback URL per message (Twilio)."""

from __future__ import annotations

from dataclasses import replace

from app.delivery.adapters import adapter_env
from providers.base import STATUS_CALLBACK_URL

ENV = {"TWILIO_AUTH_TOKEN": "token"}


def test_the_deployment_s_account_reports_to_the_provider_s_inbound_url(settings):
    public = replace(settings, external_url="https://tidings.example.com")
    env = adapter_env(public, "twilio", ENV)
    assert env == {**ENV, STATUS_CALLBACK_URL: "https://tidings.example.com/v1/inbound/twilio"}


def test_a_project_s_own_account_reports_to_its_own_url(settings):
    """Verified there with the project's own auth token, as Twilio signs with it."""
    public = replace(settings, external_url="https://tidings.example.com")
    env = adapter_env(public, "twilio", ENV, "acme")
    assert env[STATUS_CALLBACK_URL] == "https://tidings.example.com/v1/inbound/twilio/acme"


def test_without_a_public_url_no_callback_is_named_even_if_one_was_set(settings):
    """The default public URL is this host's own, which a provider cannot reach."""
    hidden = replace(settings, external_url=None)
    assert adapter_env(hidden, "twilio", {**ENV, STATUS_CALLBACK_URL: "https://stray.example.com"}) == ENV
