"""The settings of `tidings smtp`, read once from the environment like app/config.py's.

The password of an SMTP login is a project API key, so it must never cross the network in
clear: without a certificate the server refuses to start, unless it is told it is a
development server listening on a loopback address only.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from app.config import ConfigError, _int

FLAGS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


@dataclass(frozen=True)
class SmtpSettings:
    host: str
    port: int
    # Implicit TLS (like port 465), served only when a certificate is configured.
    tls_port: int
    # The server's certificate for STARTTLS and implicit TLS; None only in plaintext development
    # (TIDINGS_SMTP_PLAINTEXT_AUTH=true, on a loopback address).
    tls: ssl.SSLContext | None
    max_bytes: int
    max_recipients: int
    # The name the server greets with (EHLO).
    hostname: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SmtpSettings:
        env = os.environ if environ is None else environ
        host = env.get("TIDINGS_SMTP_HOST", "").strip() or env.get("TIDINGS_HOST", "").strip() or "127.0.0.1"
        plaintext_auth = _flag(env, "TIDINGS_SMTP_PLAINTEXT_AUTH")
        if plaintext_auth and not _loopback(host):
            raise ConfigError(
                f"TIDINGS_SMTP_PLAINTEXT_AUTH is for development on a loopback address; TIDINGS_SMTP_HOST is {host!r}"
            )
        port = _int(env, "TIDINGS_SMTP_PORT", 2525, minimum=1, maximum=65535)
        tls_port = _int(env, "TIDINGS_SMTP_TLS_PORT", 2465, minimum=1, maximum=65535)
        if tls_port == port:
            raise ConfigError(f"TIDINGS_SMTP_TLS_PORT must differ from TIDINGS_SMTP_PORT; both are {port}")
        tls = _tls_context(env)
        if tls is None and not plaintext_auth:
            raise ConfigError(
                "TIDINGS_SMTP_CERT is not set: logins carry API keys and need TLS "
                "(for development on 127.0.0.1 only: TIDINGS_SMTP_PLAINTEXT_AUTH=true)"
            )
        return cls(
            host=host,
            port=port,
            tls_port=tls_port,
            tls=tls,
            max_bytes=_int(env, "TIDINGS_SMTP_MAX_BYTES", 10 * 1024 * 1024, minimum=1024),
            max_recipients=_int(env, "TIDINGS_SMTP_MAX_RECIPIENTS", 50, minimum=1, maximum=1000),
            hostname=env.get("TIDINGS_SMTP_HOSTNAME", "").strip() or socket.gethostname(),
        )


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw not in FLAGS and raw:
        raise ConfigError(f"{name} must be true or false; got {raw!r}")
    return FLAGS.get(raw, False)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _tls_context(env: Mapping[str, str]) -> ssl.SSLContext | None:
    """The server side of TLS, from a PEM certificate chain and its key (or one file with both)."""
    cert = env.get("TIDINGS_SMTP_CERT", "").strip()
    if not cert:
        return None
    key = env.get("TIDINGS_SMTP_KEY", "").strip() or None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(f"TIDINGS_SMTP_CERT / TIDINGS_SMTP_KEY could not be loaded: {error}") from None
    return context
