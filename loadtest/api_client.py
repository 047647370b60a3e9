"""A light keep-alive HTTP client for one loopback server, timing every call by kind.

urllib3 directly rather than requests: at hundreds of calls a second the load generator's
own CPU is part of the box being measured, and urllib3 costs about half as much per call.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import urllib3

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True)
class Call:
    at: float  # wall-clock time the call started
    seconds: float
    status: int  # 0: no answer (connection refused, reset, timed out)


class Calls:
    """Every call by kind ("send", "read", "inbound", …); appends are atomic under the GIL."""

    def __init__(self) -> None:
        self.by_kind: dict[str, list[Call]] = defaultdict(list)

    def record(self, kind: str, call: Call) -> None:
        self.by_kind[kind].append(call)


class Api:
    def __init__(self, base_url: str, connections: int, calls: Calls, headers: dict[str, str] | None = None):
        parts = urlsplit(base_url)
        if parts.hostname not in LOOPBACK:
            raise ValueError(f"load is only sent to 127.0.0.1 or localhost, not {parts.hostname}")
        self.pool = urllib3.HTTPConnectionPool(
            parts.hostname, parts.port, maxsize=connections, block=True, timeout=urllib3.Timeout(connect=5, read=30)
        )
        self.calls = calls
        self.headers = {"Content-Type": "application/json", **(headers or {})}

    def call(
        self, kind: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        """One request, never retried once sent (a repeated send would be a second message)."""
        started_at, started = time.time(), time.monotonic()
        payload = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        try:
            response = self.pool.request(
                method,
                path,
                body=payload,
                headers={**self.headers, **(headers or {})},
                retries=urllib3.Retry(connect=2, read=False, redirect=False, status=False, other=False),
            )
            status, data = response.status, response.data
        except urllib3.exceptions.HTTPError as error:
            status, data = 0, str(error).encode()
        self.calls.record(kind, Call(started_at, time.monotonic() - started, status))
        return status, data

    def close(self) -> None:
        self.pool.close()
