"""A small Server-Sent Events client over a raw HTTP connection, for stream tests."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlsplit


class SseClient:
    def __init__(self, base_url: str, path: str, headers: dict[str, str] | None = None, timeout: float = 10):
        url = urlsplit(base_url)
        self.connection = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
        self.connection.request("GET", path, headers={"Accept": "text/event-stream", **(headers or {})})
        self.socket = self.connection.sock  # the response keeps it when the connection lets go
        self.response = self.connection.getresponse()
        self.status = self.response.status

    def next(self, timeout: float = 10) -> dict[str, Any] | None:
        """The next message (`data` decoded), or a heartbeat as {"comment": …}; None at the end."""
        self.socket.settimeout(timeout)
        message: dict[str, Any] = {}
        while True:
            line = self.response.readline()
            if not line:
                return None
            line = line.decode().rstrip("\n")
            if not line:
                if message:
                    return message
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "":
                message["comment"] = value
            elif field == "data":
                message["data"] = json.loads(value)
            else:
                message[field] = value

    def next_data(self, timeout: float = 10) -> dict[str, Any]:
        """The next message that carries data, skipping heartbeats and the retry hint."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self.next(timeout=max(deadline - time.monotonic(), 0.01))
            assert message is not None, "the stream ended"
            if "data" in message:
                return message
        raise AssertionError("no data in time")

    def count_until_the_end(self, most: int = 20, timeout: float = 5) -> int | None:
        """How many messages (heartbeats, say) came before the stream ended; None if it had
        not ended after `most` of them."""
        for seen in range(most):
            if self.next(timeout=timeout) is None:
                return seen
        return None

    def close(self) -> None:
        self.response.close()
        self.connection.close()
