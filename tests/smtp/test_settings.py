"""`tidings smtp` settings: TLS or loopback development, and one line when a setting is bad."""

from __future__ import annotations

import pytest

from app.config import ConfigError
from app.smtp.settings import SmtpSettings
from tests.conftest import make_env
from tests.test_config import run_cli


def test_defaults(smtp_env):
    config = SmtpSettings.from_env({k: smtp_env[k] for k in ("TIDINGS_SMTP_CERT", "TIDINGS_SMTP_KEY")})
    assert (config.host, config.port, config.tls_port) == ("127.0.0.1", 2525, 2465)
    assert (config.max_bytes, config.max_recipients) == (10 * 1024 * 1024, 50)
    assert config.tls is not None


def test_plaintext_logins_on_loopback_for_development():
    config = SmtpSettings.from_env({"TIDINGS_SMTP_PLAINTEXT_AUTH": "true", "TIDINGS_SMTP_HOST": "::1"})
    assert config.tls is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {},
            "TIDINGS_SMTP_CERT is not set: logins carry API keys and need TLS "
            "(for development on 127.0.0.1 only: TIDINGS_SMTP_PLAINTEXT_AUTH=true)",
        ),
        (
            {"TIDINGS_SMTP_PLAINTEXT_AUTH": "true", "TIDINGS_HOST": "0.0.0.0"},
            "TIDINGS_SMTP_PLAINTEXT_AUTH is for development on a loopback address; TIDINGS_SMTP_HOST is '0.0.0.0'",
        ),
        ({"TIDINGS_SMTP_PLAINTEXT_AUTH": "maybe"}, "TIDINGS_SMTP_PLAINTEXT_AUTH must be true or false; got 'maybe'"),
        (
            {"TIDINGS_SMTP_PLAINTEXT_AUTH": "1", "TIDINGS_SMTP_TLS_PORT": "2525"},
            "TIDINGS_SMTP_TLS_PORT must differ from TIDINGS_SMTP_PORT; both are 2525",
        ),
        (
            {"TIDINGS_SMTP_PLAINTEXT_AUTH": "1", "TIDINGS_SMTP_PORT": "smtp"},
            "TIDINGS_SMTP_PORT must be a whole number; got 'smtp'",
        ),
    ],
)
def test_bad_settings_name_the_setting(env, message):
    with pytest.raises(ConfigError) as raised:
        SmtpSettings.from_env(env)
    assert str(raised.value) == message


def test_an_unreadable_certificate_names_the_setting(tmp_path):
    with pytest.raises(ConfigError, match=r"^TIDINGS_SMTP_CERT / TIDINGS_SMTP_KEY could not be loaded: "):
        SmtpSettings.from_env({"TIDINGS_SMTP_CERT": str(tmp_path / "missing.pem")})


def test_the_command_stops_with_one_line_without_tls():
    result = run_cli("smtp", **make_env("postgresql://postgres@127.0.0.1:9/x", "redis://127.0.0.1:9/0"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "tidings: TIDINGS_SMTP_CERT is not set: logins carry API keys and need TLS "
        "(for development on 127.0.0.1 only: TIDINGS_SMTP_PLAINTEXT_AUTH=true)"
    ]
