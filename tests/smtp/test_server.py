"""Starting and stopping the listeners: a stop closes both ports and returns."""

from __future__ import annotations

import socket

import pytest
from flask import Flask

from app.runtime.embedded import free_port
from app.smtp.server import SmtpServer
from app.smtp.settings import SmtpSettings


def test_a_stopped_server_listens_no_more(app: Flask, smtp_env: dict[str, str]):
    config = SmtpSettings.from_env(
        {**smtp_env, "TIDINGS_SMTP_PORT": str(free_port()), "TIDINGS_SMTP_TLS_PORT": str(free_port())}
    )
    server = SmtpServer(app.extensions["tidings"].settings, config)
    server.start()
    for port in (config.port, config.tls_port):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    server.stop()
    for port in (config.port, config.tls_port):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
