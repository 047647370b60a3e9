"""A real `tidings smtp` server in this process, with a certificate from a test CA, and
smtplib (the standard library's client, which we did not write) to talk to it."""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme
from flask import Flask

from app.runtime.embedded import free_port
from app.smtp.server import SmtpServer
from app.smtp.settings import SmtpSettings

MAX_BYTES = 64 * 1024  # small, so the size limit is cheap to reach


@dataclass
class Smtp:
    """Where the server listens, and clients that have done STARTTLS (or TLS) and AUTH."""

    port: int
    tls_port: int
    client_tls: ssl.SSLContext

    def connect(self) -> smtplib.SMTP:
        smtp = smtplib.SMTP("127.0.0.1", self.port, timeout=10)
        smtp.starttls(context=self.client_tls)
        return smtp

    def login(self, key: str, username: str = "any-name") -> smtplib.SMTP:
        smtp = self.connect()
        smtp.login(username, key)
        return smtp


@pytest.fixture(scope="session")
def smtp_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    ca = trustme.CA()
    directory: Path = tmp_path_factory.mktemp("smtp-tls")
    issued = ca.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))
    issued.private_key_pem.write_to_path(str(directory / "key.pem"))
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    return {
        "TIDINGS_SMTP_HOST": "127.0.0.1",
        "TIDINGS_SMTP_PORT": str(free_port()),
        "TIDINGS_SMTP_TLS_PORT": str(free_port()),
        "TIDINGS_SMTP_CERT": str(directory / "cert.pem"),
        "TIDINGS_SMTP_KEY": str(directory / "key.pem"),
        "TIDINGS_SMTP_MAX_BYTES": str(MAX_BYTES),
        "CA_FILE": str(directory / "ca.pem"),
    }


@pytest.fixture(scope="session")
def smtp_server(app: Flask, smtp_env: dict[str, str]) -> Iterator[Smtp]:
    config = SmtpSettings.from_env(smtp_env)
    server = SmtpServer(app.extensions["tidings"].settings, config)
    server.start()
    yield Smtp(config.port, config.tls_port, ssl.create_default_context(cafile=smtp_env["CA_FILE"]))
    server.stop()


@pytest.fixture
def smtp(smtp_server: Smtp, client) -> Smtp:
    """The server, with the per-test state the `client` fixture resets (log record, fake provider)."""
    return smtp_server
