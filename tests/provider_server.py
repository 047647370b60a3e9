"""A local HTTP server that speaks the `fake` provider's batch API and keeps a ledger.

The ledger (every message the server was asked to send, with when and whether it was
accepted) is the ground truth the tests compare the database against: what reached the
provider, and how often. With `deduplicate`, it behaves like a provider that honours an
idempotency key: a message id it has accepted before is answered again, not sent again.
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
class Receipt:
    message_id: str
    to: str
    subject: str | None
    at: float
    accepted: bool


class FakeProviderServer:
    def __init__(self, latency: float = 0.0, deduplicate: bool = False) -> None:
        self.server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.latency = latency
        self.deduplicate = deduplicate
        self.receipts: list[Receipt] = []
        self._accepted: dict[str, str] = {}
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
            self.receipts.clear()
            self._accepted.clear()
        self.override = None

    def count(self, message_id: str) -> int:
        """How many times the message was delivered (accepted and not a de-duplicated repeat)."""
        with self._lock:
            return sum(1 for r in self.receipts if r.message_id == message_id and r.accepted)

    def delivered(self) -> list[Receipt]:
        with self._lock:
            return [r for r in self.receipts if r.accepted]

    def _handle(self, request: Request) -> Response:
        if self.latency:
            time.sleep(self.latency)
        messages = request.get_json()["messages"]
        now = time.time()
        answer = self.override(request) if self.override is not None else None
        if answer is not None:
            with self._lock:
                self.receipts.extend(Receipt(m["id"], m["to"], m.get("subject"), now, False) for m in messages)
            return answer
        results = []
        with self._lock:
            for m in messages:
                repeat = self.deduplicate and m["id"] in self._accepted
                provider_id = self._accepted.setdefault(m["id"], f"fake-{uuid.uuid4().hex}")
                self.receipts.append(Receipt(m["id"], m["to"], m.get("subject"), now, not repeat))
                results.append({"id": m["id"], "status": "accepted", "provider_id": provider_id})
        return json_response({"results": results})


def json_response(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(body), status=status, headers=headers, content_type="application/json")
