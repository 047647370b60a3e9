"""`tidings smtp`: the listeners, their TLS, and a stop that lets accepted messages finish.

Two listeners share one thread pool for the blocking work: submission on TIDINGS_SMTP_PORT
(STARTTLS required before anything else when a certificate is set) and, with a certificate,
implicit TLS on TIDINGS_SMTP_TLS_PORT. Both require AUTH before MAIL.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any

from aiosmtpd.controller import Controller

from app.config import Settings
from app.delivery.broker import configure
from app.smtp.handler import Ingress, unverified
from app.smtp.settings import SmtpSettings

logger = logging.getLogger(__name__)

# Threads for database and Redis work: as many as the engine's pool keeps connections for.
POOL_THREADS = 5
# How long a stop waits for messages being stored to be answered.
DRAIN_SECONDS = 10.0


class _AiosmtpdNoise(logging.Filter):
    """Warnings aiosmtpd logs on every connection that say nothing here: it counts only
    STARTTLS as TLS, so the implicit-TLS listener (and plaintext development) must allow AUTH
    "without TLS"; and its own AUTH code sets the deprecated `Session.login_data`."""

    NOISE = ("auth_require_tls == False", "Session.login_data is deprecated")

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(noise in message for noise in self.NOISE)


logging.getLogger("mail.log").addFilter(_AiosmtpdNoise())
warnings.filterwarnings("ignore", message="Requiring AUTH while not requiring TLS")


class SmtpServer:
    def __init__(self, settings: Settings, config: SmtpSettings):
        self.config = config
        self.pool = ThreadPoolExecutor(max_workers=POOL_THREADS, thread_name_prefix="tidings-smtp")
        shared: dict[str, Any] = {
            "server_hostname": config.hostname,
            "ident": "Tidings",
            "auth_required": True,
            "authenticator": unverified,
            "data_size_limit": config.max_bytes,
            "enable_SMTPUTF8": True,
        }
        submission = Ingress(settings, config.max_recipients, self.pool)
        self.listeners = [
            (
                submission,
                Controller(
                    submission,
                    hostname=config.host,
                    port=config.port,
                    tls_context=config.tls,
                    require_starttls=config.tls is not None,
                    auth_require_tls=config.tls is not None,
                    **shared,
                ),
            )
        ]
        if config.tls is not None:
            implicit = Ingress(settings, config.max_recipients, self.pool)
            controller = Controller(
                implicit,
                hostname=config.host,
                port=config.tls_port,
                ssl_context=config.tls,
                auth_require_tls=False,
                **shared,
            )
            self.listeners.append((implicit, controller))

    def start(self) -> None:
        for _, controller in self.listeners:
            controller.start()

    def stop(self) -> None:
        """Stop listening, give messages being stored the time to be answered, then close."""
        for _, controller in self.listeners:
            if controller.server is not None:
                controller.loop.call_soon_threadsafe(controller.server.close)
        deadline = time.monotonic() + DRAIN_SECONDS
        while any(handler.busy for handler, _ in self.listeners) and time.monotonic() < deadline:
            time.sleep(0.05)
        for _, controller in self.listeners:
            controller.stop()
        self.pool.shutdown(wait=True)


def serve(settings: Settings, config: SmtpSettings) -> None:
    """Run until SIGINT or SIGTERM."""
    configure(settings)  # prepare tasks go to this deployment's broker
    logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd logs every command at INFO
    server = SmtpServer(settings, config)
    server.start()
    if config.tls is None:
        logger.warning("SMTP on %s:%s without TLS: logins in clear, for development only", config.host, config.port)
    else:
        logger.info("SMTP on %s:%s (STARTTLS) and %s (TLS)", config.host, config.port, config.tls_port)
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    stopping.wait()
    logger.info("stopping SMTP")
    server.stop()
