"""Bounded HTTP exchanges: a total deadline and a cap on the answer for every provider call,
webhook and outbound webhook POST.

Whoever answers may be a tenant's own server, so its answer must not be able to hold or
kill a shared worker: an endless body, a gzip bomb, a byte dripped every few seconds.
requests' timeout applies to each read, never to the whole exchange, and its `.content`
reads everything. So here the answer is streamed and decoded at most ANSWER_LIMIT bytes
far (urllib3 bounds each decompression step), the connection is closed when the answer
went on, and every socket read, the status line and headers included, is given only the
time left before the call's deadline. That needs no signal and no extra thread, so it
works in Celery's threads pool as in prefork.
"""

from __future__ import annotations

import http.client
import io
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import DecodeError, ProtocolError, ReadTimeoutError, SSLError

# The most of an answer we read: enough for any provider's answer to one message and for a
# receiver's excerpt; more is cut off, and an answer we must parse is then an error.
ANSWER_LIMIT = 64 * 1024
# A batch API answers for every message: its answer may be this much longer per message.
ANSWER_PER_MESSAGE = 1024

# PostgreSQL's text and jsonb refuse NUL, and a lone surrogate cannot be encoded as UTF-8.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

# The deadline of the exchange running on this thread, for the connections it uses: requests
# hands them a timeout per read, never the call's deadline.
_call = threading.local()


def batch_limit(messages: int) -> int:
    """How much of a batch API's answer for `messages` messages to read."""
    return ANSWER_LIMIT + messages * ANSWER_PER_MESSAGE


def storable(text: str) -> str:
    """`text` with what PostgreSQL would refuse to store replaced by U+FFFD."""
    return UNSTORABLE.sub("\ufffd", text)


def storable_json(value: Any) -> Any:
    """Parsed JSON with every string storable: its strings may end up in errors and ids we store."""
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, list):
        return [storable_json(item) for item in value]
    if isinstance(value, dict):
        return {storable(key): storable_json(item) for key, item in value.items()}
    return value


@dataclass(frozen=True)
class Answer:
    """What a server answered, as much of it as we read."""

    status_code: int
    headers: Mapping[str, str]  # case-insensitive, as requests gives them
    content: bytes  # at most `limit` bytes
    oversize: bool  # the answer went on past `limit`: `content` is only its beginning
    limit: int
    encoding: str | None = None  # the charset of Content-Type, as requests reads it

    def excerpt(self, length: int) -> str:
        """The first `length` characters, fit to store: the one place answer text is made."""
        raw = self.content[: length * 4]  # no UTF-8 character takes more than four bytes
        try:
            text = raw.decode(self.encoding or "utf-8", errors="replace")
        except LookupError:  # a charset Python does not know
            text = raw.decode("utf-8", errors="replace")
        return storable(text[:length])

    def json(self) -> Any:
        """The answer's JSON; ValueError when it is not JSON or was cut off."""
        if self.oversize:
            raise ValueError(f"answer over {self.limit // 1024} KiB")
        try:
            return storable_json(json.loads(self.content))
        except RecursionError:
            raise ValueError("answer nested too deeply") from None


class DeadlinePassed(requests.ReadTimeout):
    """The exchange did not end within its deadline: the request may have been received."""


def exchange(
    session: requests.Session, method: str, url: str, seconds: float, limit: int = ANSWER_LIMIT, **kwargs: Any
) -> Answer:
    """Send one request and keep at most `limit` bytes of its answer, all within `seconds`.

    One byte more is read and decoded, to know that the answer went on (`oversize`).

    `session` must have a BoundedAdapter (see `bound`). Redirects are never followed. Raises
    what requests raises, with DeadlinePassed for any read past the deadline.
    """
    headers = {**(kwargs.pop("headers", None) or {}), "Accept-Encoding": "identity"}
    _call.deadline = time.monotonic() + seconds
    try:
        response = session.request(
            method, url, headers=headers, timeout=seconds, stream=True, allow_redirects=False, **kwargs
        )
        with response:  # closes the connection unless the answer was read to its end
            content = read_at_most(response, limit + 1)
    except requests.ReadTimeout as error:
        raise DeadlinePassed(f"no complete answer within {seconds:g}s") from error
    finally:
        del _call.deadline
    return Answer(
        response.status_code, response.headers, content[:limit], len(content) > limit, limit, response.encoding
    )


def read_at_most(response: requests.Response, size: int) -> bytes:
    """Up to `size` bytes of the decoded body, with urllib3's errors as requests' own."""
    try:
        return response.raw.read(size, decode_content=True)
    except ReadTimeoutError as error:
        raise requests.ReadTimeout(error) from error
    except ProtocolError as error:
        raise requests.ConnectionError(error) from error
    except DecodeError as error:
        raise requests.exceptions.ContentDecodingError(error) from error
    except SSLError as error:
        raise requests.exceptions.SSLError(error) from error


# -- the transport ---------------------------------------------------------------------------


class DeadlineReader(io.RawIOBase):
    """A connection's socket as http.client reads it, each read given only the time left."""

    def __init__(self, raw: io.RawIOBase, sock: Any, deadline: float):
        self.raw, self.sock, self.deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the exchange's deadline passed")
        self.sock.settimeout(left)
        return self.raw.readinto(buffer)

    def close(self) -> None:
        self.raw.close()  # the socket's own reader: lets the connection close the socket
        super().close()


class DeadlineResponse(http.client.HTTPResponse):
    """http.client's response, reading through a DeadlineReader during an exchange."""

    def __init__(self, sock: Any, *args: Any, **kwargs: Any):
        super().__init__(sock, *args, **kwargs)
        deadline = getattr(_call, "deadline", None)
        if deadline is not None:
            self.fp = io.BufferedReader(DeadlineReader(self.fp.detach(), sock, deadline))


def bounded(base: type[HTTPConnection]) -> type[HTTPConnection]:
    """A urllib3 connection class whose answers keep the deadline of the exchange using it."""

    class Bounded(base):  # type: ignore[misc, valid-type]  # a base chosen at run time, which mypy cannot check
        response_class = DeadlineResponse

        def _new_conn(self):
            sock = super()._new_conn()
            deadline = getattr(_call, "deadline", None)
            if deadline is not None:  # the TLS handshake gets only what the connect left
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
            return sock

    return Bounded


def unchanged(base: type[HTTPConnection]) -> type[HTTPConnection]:
    return base


class BoundedAdapter(HTTPAdapter):
    """A requests transport whose every connection is `bounded`; `wrap` may add to them."""

    def __init__(self, wrap: Callable[[type[HTTPConnection]], type[HTTPConnection]] = unchanged):
        self.pools = {
            "http": type("BoundedPool", (HTTPConnectionPool,), {"ConnectionCls": wrap(bounded(HTTPConnection))}),
            "https": type("BoundedTLSPool", (HTTPSConnectionPool,), {"ConnectionCls": wrap(bounded(HTTPSConnection))}),
        }
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self.pools


def bound(session: requests.Session) -> requests.Session:
    """`session` with a BoundedAdapter for http and https, unless it has one (a guarded one)."""
    for prefix in ("http://", "https://"):
        if not isinstance(session.adapters.get(prefix), BoundedAdapter):
            session.mount(prefix, BoundedAdapter())
    return session
