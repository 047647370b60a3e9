"""Receivers that answer badly on purpose, on 127.0.0.1: an endless body, a gzip bomb, a
byte every half second, NUL bytes; and one that answers well.

Each path counts its requests, the body bytes it handed to the socket, and whether the
client hung up before the body ended, so a test can see what a call cost the server side.
"""

from __future__ import annotations

import functools
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from tests.waiting import wait_until

HOSTILE = ("endless", "bomb", "drip", "nul")
ENDLESS_CHUNK = b"endless " * 8192  # 64 KiB
BOMB_PATTERN = b"bomb " * 262144  # 1.25 MiB
BOMB_REPEATS = 200  # 250 MiB once decompressed
NUL_BODY = b"refused\x00\x00 by the receiver"
DRIP_EVERY = 0.5


@functools.cache
def gzip_bomb() -> bytes:
    """About 380 KB of gzip that expands to 250 MiB."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join([compressor.compress(BOMB_PATTERN) for _ in range(BOMB_REPEATS)] + [compressor.flush()])


@dataclass
class Served:
    requests: int = 0
    offered: int = 0  # body bytes handed to the socket
    hung_up: bool = False  # the client closed the connection before the body ended


class HostileServer:
    """One threaded server; `url(behaviour, status)` names what to answer, and with which status."""

    def __init__(self) -> None:
        self.server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.served: dict[str, Served] = {}
        self._lock = threading.Lock()

    def start(self) -> HostileServer:
        gzip_bomb()  # made once, before any request: it takes the server a second
        self.server.start()
        for behaviour in (*HOSTILE, "good"):
            self.server.expect_request(f"/{behaviour}").respond_with_handler(functools.partial(self._answer, behaviour))
        return self

    def stop(self) -> None:
        self.server.stop()

    def reset(self) -> None:
        with self._lock:
            self.served = {}

    @property
    def base(self) -> str:
        return self.server.url_for("")

    def url(self, behaviour: str, status: int = 200) -> str:
        return self.server.url_for(f"/{behaviour}?status={status}")

    def stats(self, behaviour: str) -> Served:
        with self._lock:
            return self.served.setdefault(behaviour, Served())

    def wait_hung_up(self, behaviour: str, timeout: float = 10) -> None:
        """Wait until the client hung up on `behaviour`'s body; a server learns it on its next write."""
        wait_until(lambda: self.stats(behaviour).hung_up, bool, timeout, f"the client to hang up on {behaviour}")

    def _answer(self, behaviour: str, request: Request) -> Response:
        served = self.stats(behaviour)
        with self._lock:
            served.requests += 1
        status = int(request.args.get("status", "200"))
        if behaviour == "bomb":
            body = gzip_bomb()
            served.offered += len(body)
            return Response(body, status, {"Content-Encoding": "gzip", "Content-Type": "text/plain"})
        if behaviour == "nul":
            served.offered += len(NUL_BODY)
            return Response(NUL_BODY, status, content_type="text/plain")
        if behaviour == "good":
            return Response("ok", status)
        chunks = endless() if behaviour == "endless" else drip()
        return Response(counted(served, chunks), status, content_type="text/plain")


def endless() -> Iterator[bytes]:
    for _ in range(100_000):  # 6.4 GB: far more than any client may read
        yield ENDLESS_CHUNK


def drip() -> Iterator[bytes]:
    for _ in range(1200):  # ten minutes at most
        yield b"."
        time.sleep(DRIP_EVERY)  # the server's pace, not a wait of the test


def counted(served: Served, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Pass `chunks` on, counting them, and note when the client hung up before the last one."""
    ended = False
    try:
        for chunk in chunks:
            served.offered += len(chunk)
            yield chunk
        ended = True
    finally:
        served.hung_up = not ended
