"""A local HTTP server that speaks the `fake` provider's batch API and keeps a ledger.

The ledger (every message the server accepted, with when) is the ground truth the tests
compare the database against: what reached the provider, and how often.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response


@dataclass(frozen=True)
class Delivery:
    message_id: str
    to: str
    subject: str | None
    at: float


class FakeProviderServer:
    def __init__(self) -> None:
        self.server = HTTPServer(host="127.0.0.1", port=0)
        self.ledger: list[Delivery] = []
        self._lock = threading.Lock()
        # A test may answer differently (errors, rejections); None means accept everything.
        self.override: Callable[[Request], Response | None] | None = None

    @property
    def url(self) -> str:
        return self.server.url_for("")

    def start(self) -> FakeProviderServer:
        self.server.start()
        self.server.expect_request("/messages", method="POST").respond_with_handler(self._handle)
        return self

    def stop(self) -> None:
        self.server.stop()

    def reset(self) -> None:
        with self._lock:
            self.ledger.clear()
        self.override = None

    def count(self, message_id: str) -> int:
        with self._lock:
            return sum(1 for d in self.ledger if d.message_id == message_id)

    def _handle(self, request: Request) -> Response:
        if self.override is not None:
            answer = self.override(request)
            if answer is not None:
                return answer
        messages = request.get_json()["messages"]
        now = time.time()
        with self._lock:
            self.ledger.extend(Delivery(m["id"], m["to"], m.get("subject"), now) for m in messages)
        results = [
            {"id": m["id"], "status": "accepted", "provider_id": f"fake-{uuid.uuid4().hex}"} for m in messages
        ]
        return json_response({"results": results})


def json_response(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(body), status=status, headers=headers, content_type="application/json")
