"""The SMTP conversation: who sends (AUTH), whether they may (MAIL), to whom (RCPT) and what
(DATA), each answered with the code a mail client knows how to act on.

aiosmtpd runs every connection on one asyncio loop. Whatever blocks (PostgreSQL, Redis,
reading a 10 MB message) runs on a thread pool, so one slow commit never stalls the other
connections; DATA is answered 250 only once its rows are committed.

A login lasts no longer than its key: every message asks again whether the key holds (one
Redis GET while nothing changed, as an event stream asks at each heartbeat), so a key
revoked mid-session has its next message refused and the session signed out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from marshmallow import ValidationError, validate

from app.access.auth import Caller
from app.access.caller_cache import CallerCache
from app.access.ratelimit import ApiRateLimiter
from app.access.refusals import LimitReached, LimitTooSmall, LimitUnknown
from app.config import Settings
from app.content.mime import Malformed, read_mail
from app.db import session_factory
from app.enums import Channel
from app.redis_client import redis_for
from app.services.mail import FilesNotCarried, accept_mail

logger = logging.getLogger(__name__)

T = TypeVar("T")
VALID_EMAIL = validate.Email()  # the API's own check of an email address
MAX_REASON = 300  # an SMTP reply line stays under 512 octets
SIGNED_OUT = "530 5.7.0 The API key of this login is no longer valid; authenticate again"


@dataclass(frozen=True)
class Login:
    """A session's login: the key it gave, asked about again for every message."""

    key: str


class KeyRevoked(Exception):
    """The session's key stopped authenticating between its MAIL and its DATA."""


def unverified(server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any) -> AuthResult:
    """aiosmtpd's authenticator: it only hands over the credentials aiosmtpd decoded.

    The key is looked up off the loop by `Ingress.verify`; on its own this refuses everyone,
    so a login that somehow skipped `verify` fails closed.
    """
    return AuthResult(success=False, handled=False, auth_data=auth_data)


class Ingress:
    """The aiosmtpd handler of one listener: its hooks answer AUTH, MAIL, RCPT and DATA.

    The login's password is a project API key (live or test); the username is not looked at.
    """

    def __init__(self, settings: Settings, max_recipients: int, pool: Executor):
        self.settings = settings
        self.max_recipients = max_recipients
        self.pool = pool
        self.db = session_factory(settings.database_url)
        client = redis_for(settings.redis_url)
        self.limiter = ApiRateLimiter(client)
        self.callers = CallerCache(self.db, client)
        # DATA commands between their last byte and their answer, so a stop can wait for them.
        self.busy = 0

    async def offload(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, function, *args)

    # aiosmtpd takes `auth_<MECHANISM>` methods of the handler as the server's mechanisms; these
    # reuse its own parsing of PLAIN and LOGIN and check the key off the loop.
    async def auth_PLAIN(self, server: SMTP, args: list[str]) -> AuthResult:
        return await self.verify(await server.auth_PLAIN(server, args))

    async def auth_LOGIN(self, server: SMTP, args: list[str]) -> AuthResult:
        return await self.verify(await server.auth_LOGIN(server, args))

    async def verify(self, parsed: AuthResult) -> AuthResult:
        credentials = parsed.auth_data
        if not isinstance(credentials, LoginPassword):
            return parsed  # the client's answer could not be read; aiosmtpd has said so
        key = credentials.password.decode("utf-8", errors="replace")
        try:
            caller = await self.offload(self.callers.caller, key, True)
        except Exception:
            logger.exception("could not check an SMTP login")
            return AuthResult(success=False, handled=False, message="454 4.7.0 Temporary authentication failure")
        if caller is None:
            return AuthResult(success=False, handled=False)  # aiosmtpd answers 535
        return AuthResult(success=True, auth_data=Login(key))

    def still_valid(self, login: Login) -> Caller:
        """Who the login's key is now; KeyRevoked once it no longer authenticates."""
        caller = self.callers.caller(login.key, fresh=True)
        if caller is None:
            raise KeyRevoked
        return caller

    @staticmethod
    def sign_out(session: Session) -> str:
        """End a login whose key was revoked: the client may authenticate again with another."""
        session.authenticated = False
        session.auth_data = None
        return SIGNED_OUT

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, mail_options: list[str]
    ) -> str:
        """A new message: the key must still hold, the project have email on and be within its rate limit."""
        try:
            caller = await self.offload(self.still_valid, session.auth_data)
        except KeyRevoked:
            return self.sign_out(session)
        except Exception:
            logger.exception("could not check an SMTP login's key")
            return "451 4.3.0 The login could not be checked; try again later"
        if Channel.EMAIL.value not in caller.channels:
            return "550 5.7.1 The email channel is not enabled for this project"
        if caller.rate_limit_per_min:
            verdict = await self.offload(self.limiter.check, caller.project_id, caller.rate_limit_per_min)
            if verdict is not None and not verdict.allowed:
                return f"451 4.7.1 Rate limit exceeded; try again in {verdict.reset_seconds} seconds"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 2.1.0 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        """Each recipient becomes a message of its own; 452 asks the client to send the rest again."""
        if len(envelope.rcpt_tos) >= self.max_recipients:
            return f"452 4.5.3 Too many recipients: at most {self.max_recipients} per message, send the rest again"
        try:
            VALID_EMAIL(address)
        except ValidationError:
            return "553 5.1.3 Not a valid email address"
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        """Store the message for every recipient; 250 only once the rows are committed."""
        self.busy += 1
        try:
            ids = await self.offload(self.accept, session.auth_data, list(envelope.rcpt_tos), envelope.content)
        except KeyRevoked:
            return self.sign_out(session)
        except Malformed as error:
            return f"554 5.6.0 Malformed message: {reply_text(error)}"
        except FilesNotCarried as error:
            return f"554 5.6.1 Attachments cannot be sent: {reply_text(error)}"
        except LimitTooSmall as error:
            return f"552 5.3.4 {reply_text(error.description)}"
        except (LimitReached, LimitUnknown) as error:
            return f"451 4.7.1 {reply_text(error.description)} Try again in {error.retry_after} seconds"
        except Exception:
            logger.exception("could not store a message received over SMTP")
            return "451 4.3.0 The message could not be stored; try again later"
        finally:
            self.busy -= 1
        more = f" and {len(ids) - 1} more" if len(ids) > 1 else ""
        return f"250 2.0.0 OK: queued as {ids[0]}{more}"

    def accept(self, login: Login, recipients: list[str], raw: bytes) -> list[str]:
        return accept_mail(self.db, self.still_valid(login), recipients, read_mail(raw), self.settings.chains)


def reply_text(error: object) -> str:
    """An error's text (or any text) fit for an SMTP reply: one line of ASCII, not too long."""
    return " ".join(str(error).split()).encode("ascii", errors="replace").decode()[:MAX_REASON]
