"""Settings: read from the environment, and a bad one stops start-up with one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.config import ConfigError, Settings
from app.enums import Channel
from tests.conftest import make_env

GOOD = make_env("postgresql://postgres@127.0.0.1:5432/x", "redis://127.0.0.1:6379/0")


def test_defaults():
    settings = Settings.from_env(GOOD)
    assert settings.database_url == "postgresql+psycopg2://postgres@127.0.0.1:5432/x"
    assert settings.broker_url == settings.redis_url
    assert settings.providers[Channel.EMAIL] == "log"
    assert settings.port == 8000
    assert settings.prepare_linger == 0.05
    assert (settings.worker_heartbeat, settings.worker_dead_after, settings.sweep_interval) == (1.0, 10.0, 10.0)
    assert Settings.from_env({**GOOD, "PREPARE_LINGER_MS": "0"}).prepare_linger == 0


def test_the_console_cookie_is_secure_behind_https_unless_told():
    assert Settings.from_env(GOOD).console_secure_cookie is False
    behind_https = {**GOOD, "TIDINGS_PUBLIC_URL": "https://tidings.example.com"}
    assert Settings.from_env(behind_https).console_secure_cookie is True
    assert Settings.from_env({**behind_https, "CONSOLE_SECURE_COOKIE": "false"}).console_secure_cookie is False
    assert Settings.from_env({**GOOD, "CONSOLE_SECURE_COOKIE": "true"}).console_secure_cookie is True
    assert Settings.from_env({**GOOD, "CONSOLE_SESSION_HOURS": "1"}).console_session_hours == 1


def test_a_channel_lists_its_providers_in_failover_order():
    settings = Settings.from_env(
        {
            **GOOD,
            "EMAIL_PROVIDER": "fake, fake2,log",
            "FAKE_PROVIDER_URL": "http://127.0.0.1:9001",
            "FAKE2_PROVIDER_URL": "http://127.0.0.1:9002",
            "FAKE_RATE_PER_SEC": "50",
            "EMAIL_RATE_PER_SEC": "10",
            "BREAKER_COOLDOWN_SECONDS": "2.5",
            "TIDINGS_PUBLIC_URL": "https://tidings.example.com/",
        }
    )
    assert settings.chains[Channel.EMAIL] == ("fake", "fake2", "log")
    assert settings.providers[Channel.EMAIL] == "fake"
    assert settings.providers[Channel.SMS] == "log"
    assert settings.chained_providers == {"fake", "fake2", "log"}
    # A provider's own pace wins; the others of the chain take the channel's.
    assert settings.rates == {"fake": 50.0, "fake2": 10.0, "log": 10.0}
    assert settings.breaker.cooldown == 2.5
    assert settings.public_url == "https://tidings.example.com"


def test_daily_quotas_and_the_message_limit_default_per_channel():
    defaults = Settings.from_env(GOOD)
    assert (defaults.daily_quotas, defaults.messages_per_min) == ({Channel.EMAIL: 250_000}, None)
    changed = Settings.from_env(
        {**GOOD, "EMAIL_DAILY_QUOTA": "none", "SMS_DAILY_QUOTA": "1000", "RATE_LIMIT_MESSAGES_PER_MINUTE": "600"}
    )
    assert (changed.daily_quotas, changed.messages_per_min) == ({Channel.SMS: 1000}, 600)


def test_broker_may_be_rabbitmq():
    settings = Settings.from_env({**GOOD, "CELERY_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//"})
    assert settings.broker_url.startswith("amqp://")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"DATABASE_URL": ""}, "DATABASE_URL is not set"),
        (
            {"DATABASE_URL": "mysql://x"},
            "DATABASE_URL must start with one of postgresql://, postgres://, postgresql+psycopg2://; got 'mysql://x'",
        ),
        (
            {"REDIS_URL": "localhost:6379"},
            "REDIS_URL must start with one of redis://, rediss://, unix://; got 'localhost:6379'",
        ),
        (
            {"CELERY_BROKER_URL": "kafka://x"},
            "CELERY_BROKER_URL must start with one of redis://, rediss://, amqp://, amqps://; got 'kafka://x'",
        ),
        ({"TIDINGS_ADMIN_KEY": "short"}, "TIDINGS_ADMIN_KEY must be at least 16 characters long"),
        ({"TIDINGS_PORT": "eighty"}, "TIDINGS_PORT must be a whole number; got 'eighty'"),
        ({"TIDINGS_PORT": "70000"}, "TIDINGS_PORT must be from 1 to 65535; got 70000"),
        (
            {"EMAIL_PROVIDER": "carrier-pigeon"},
            "EMAIL_PROVIDER must be one of fake, fake2, log, postmark, resend, sendgrid, ses, smtp; "
            "got 'carrier-pigeon'",
        ),
        ({"SMS_PROVIDER": "postmark"}, "SMS_PROVIDER must be one of fake, fake2, log, twilio; got 'postmark'"),
        ({"EMAIL_PROVIDER": "fake"}, "EMAIL_PROVIDER=fake: FAKE_PROVIDER_URL is not set"),
        (
            {"EMAIL_PROVIDER": "log,fake2", "FAKE_PROVIDER_URL": "http://127.0.0.1:9"},
            "EMAIL_PROVIDER=fake2: FAKE2_PROVIDER_URL is not set",
        ),
        ({"EMAIL_PROVIDER": "log,"}, "EMAIL_PROVIDER must list providers separated by commas, each once; got 'log,'"),
        (
            {"EMAIL_PROVIDER": "log, log"},
            "EMAIL_PROVIDER must list providers separated by commas, each once; got 'log, log'",
        ),
        ({"BREAKER_ERROR_RATE": "1.5"}, "BREAKER_ERROR_RATE must be at most 1.0; got 1.5"),
        ({"RESEND_WEBHOOK_SECRET": "secret"}, "resend status webhooks: RESEND_WEBHOOK_SECRET must start with whsec_"),
        (
            {"POSTMARK_WEBHOOK_USERNAME": "postmark"},
            "postmark status webhooks: POSTMARK_WEBHOOK_PASSWORD is not set",
        ),
        (
            {"SENDGRID_WEBHOOK_PUBLIC_KEY": "bm90IGEga2V5"},
            "sendgrid status webhooks: SENDGRID_WEBHOOK_PUBLIC_KEY is not a public key (base64 DER, or PEM)",
        ),
        (
            {"SES_SNS_TOPIC_ARNS": "arn:aws:sns:eu-west-1:123456789012:ses", "SES_SNS_TEST_HOST": "example.com:80"},
            "ses status webhooks: SES_SNS_TEST_HOST may only name 127.0.0.1:<port>; got 'example.com:80'",
        ),
        ({"BREAKER_FAILURES": "0"}, "BREAKER_FAILURES must be at least 1; got 0"),
        ({"CONSOLE_SECURE_COOKIE": "maybe"}, "CONSOLE_SECURE_COOKIE must be true or false; got 'maybe'"),
        ({"CONSOLE_SESSION_HOURS": "0"}, "CONSOLE_SESSION_HOURS must be from 1 to 720; got 0"),
        (
            {"WORKER_HEARTBEAT_SECONDS": "2", "WORKER_DEAD_AFTER_SECONDS": "5"},
            "WORKER_DEAD_AFTER_SECONDS must be at least 6.0; got 5.0",
        ),
        ({"PREPARE_LINGER_MS": "2.5"}, "PREPARE_LINGER_MS must be a whole number; got '2.5'"),
        ({"PREPARE_LINGER_MS": "-1"}, "PREPARE_LINGER_MS must be from 0 to 10000; got -1"),
        ({"PREPARE_LINGER_MS": "60000"}, "PREPARE_LINGER_MS must be from 0 to 10000; got 60000"),
        ({"EMAIL_DAILY_QUOTA": "lots"}, "EMAIL_DAILY_QUOTA must be a whole number; got 'lots'"),
        ({"IN_APP_DAILY_QUOTA": "-5"}, "IN_APP_DAILY_QUOTA must be at least 0; got -5"),
        ({"RATE_LIMIT_MESSAGES_PER_MINUTE": "0"}, "RATE_LIMIT_MESSAGES_PER_MINUTE must be at least 1; got 0"),
        (
            {"TIDINGS_PUBLIC_URL": "tidings.example.com"},
            "TIDINGS_PUBLIC_URL must start with one of http://, https://; got 'tidings.example.com'",
        ),
        (
            {"FLOWER_BASIC_AUTH": "admin:short"},
            "FLOWER_BASIC_AUTH must be user:password pairs, comma-separated, passwords of 8 characters or more",
        ),
    ],
)
def test_bad_settings_name_the_setting(change, message):
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({**GOOD, **change})
    assert str(raised.value) == message


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    return subprocess.run(
        [sys.executable, "-m", "app.runtime.cli", *args],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", [("api",), ("worker",), ("db", "upgrade")])
def test_malformed_database_url_stops_start_up_with_one_line(command):
    result = run_cli(*command, **{**GOOD, "DATABASE_URL": "mysql://db.example/x"})
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "tidings: DATABASE_URL must start with one of postgresql://, postgres://, postgresql+psycopg2://; "
        "got 'mysql://db.example/x'"
    ]


def test_unreachable_database_stops_start_up_with_one_line():
    result = run_cli("api", **{**GOOD, "DATABASE_URL": "postgresql://postgres@127.0.0.1:9/nowhere"})
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("tidings: cannot reach PostgreSQL: ")


def test_help_lists_the_commands():
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("api", "worker", "beat", "flower", "db", "dev"):
        assert command in result.stdout


def test_flower_beyond_loopback_needs_basic_auth():
    result = run_cli("flower", **{**GOOD, "TIDINGS_HOST": "0.0.0.0"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "tidings: FLOWER_BASIC_AUTH is not set, and Flower would listen on 0.0.0.0"
    ]


def test_a_bad_log_format_stops_every_command_with_one_line():
    result = run_cli("db", "current", **{**GOOD, "TIDINGS_LOG_FORMAT": "xml"})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["tidings: TIDINGS_LOG_FORMAT must be json or text; got 'xml'"]
