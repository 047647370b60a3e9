"""A local HTTP server that speaks the `fake` provider's batch API and keeps a ledger.

The ledger is the ground truth the tests compare the database against: every request the
server was asked to serve (who sent it, when it arrived, when it was answered, with what),
and every recipient in it. From it a test reads how often each message reached its
recipient, how often it was asked for at all (repeats included), and which requests are
open right now, so a fault can be shown to land in the middle of a call.

`deduplicate` chooses which kind of provider it plays, per test: True is one that honours
an idempotency key, as Resend does (our message id is the key: a message it has accepted
before is answered again, not sent again); False is one that takes no key, as Postmark
(every accepted recipient is a delivery, repeats included).

A sender may add one path segment before `/messages` (`FAKE_PROVIDER_URL=<url>/<name>`):
the ledger records it, which is how the fault tests tell which worker process sent what.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

# `/messages`, or `/<sender>/messages` for a sender that names itself.
MESSAGES_PATH = re.compile(r"^(?:/(?P<sender>[^/]+))?/messages$")


@dataclass(frozen=True)
class Receipt:
    """One recipient of one request."""

    message_id: str
    to: str
    subject: str | None
    at: float  # when its request arrived, by the provider's clock
    delivered: bool  # accepted, and no repeat the provider de-duplicated: one delivery to the recipient
    sender: str  # the path segment its sender added: which worker sent it
    request: int  # the number of its request in the ledger


@dataclass
class Call:
    """One request to the provider, from its arrival to its answer (`ended` None while open)."""

    number: int
    sender: str
    started: float
    message_ids: tuple[str, ...]
    ended: float | None = None
    status: int | None = None

    def open_throughout(self, since: float, until: float) -> bool:
        return self.started <= since and (self.ended is None or self.ended >= until)


class FakeProviderServer:
    def __init__(self, latency: float = 0.0, deduplicate: bool = False) -> None:
        self.server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.latency = latency
        self.deduplicate = deduplicate
        self.receipts: list[Receipt] = []
        self.calls: list[Call] = []
        self._accepted: dict[str, str] = {}
        self._lock = threading.Lock()
        # A test may answer differently (errors, rejections); None means accept everything.
        self.override: Callable[[Request], Response | None] | None = None

    @property
    def url(self) -> str:
        return self.server.url_for("")

    def start(self) -> FakeProviderServer:
        self.server.start()
        self.server.expect_request(MESSAGES_PATH, method="POST").respond_with_handler(self._handle)
        return self

    def stop(self) -> None:
        self.server.stop()

    def reset(self) -> None:
        with self._lock:
            self.receipts.clear()
            self.calls.clear()
            self._accepted.clear()
        self.override = None

    def count(self, message_id: str) -> int:
        """How many times the message was delivered (accepted and not a de-duplicated repeat)."""
        return self.deliveries()[message_id]

    def delivered(self) -> list[Receipt]:
        with self._lock:
            return [r for r in self.receipts if r.delivered]

    def deliveries(self) -> Counter[str]:
        """How many times each message reached its recipient."""
        with self._lock:
            return Counter(r.message_id for r in self.receipts if r.delivered)

    def appearances(self) -> Counter[str]:
        """How many requests carried each message, answered or still open, whatever the
        answer: repeats included."""
        with self._lock:
            return Counter(message_id for call in self.calls for message_id in call.message_ids)

    def open_requests(self) -> list[Call]:
        """The requests in flight now: arrived, not yet answered."""
        with self._lock:
            return [call for call in self.calls if call.ended is None]

    def open_throughout(self, since: float, until: float) -> list[Call]:
        """The requests in flight for the whole of [`since`, `until`] (time.time()): arrived
        before it, answered after it or not yet."""
        with self._lock:
            return [call for call in self.calls if call.open_throughout(since, until)]

    def _handle(self, request: Request) -> Response:
        messages = request.get_json()["messages"]
        sender = MESSAGES_PATH.match(request.path)["sender"] or ""
        with self._lock:
            call = Call(len(self.calls) + 1, sender, time.time(), tuple(m["id"] for m in messages))
            self.calls.append(call)
        response: Response | None = None
        try:
            response = self._answer(request, call, messages)
            return response
        finally:
            with self._lock:
                call.ended = time.time()
                call.status = None if response is None else response.status_code

    def _answer(self, request: Request, call: Call, messages: list[dict]) -> Response:
        if self.latency:
            time.sleep(self.latency)
        answer = self.override(request) if self.override is not None else None
        if answer is not None:  # the test's answer, not an acceptance: nothing was delivered
            with self._lock:
                self.receipts.extend(receipt(call, m, delivered=False) for m in messages)
            return answer
        results = []
        with self._lock:
            for m in messages:
                repeat = self.deduplicate and m["id"] in self._accepted
                provider_id = self._accepted.setdefault(m["id"], f"fake-{uuid.uuid4().hex}")
                self.receipts.append(receipt(call, m, delivered=not repeat))
                results.append({"id": m["id"], "status": "accepted", "provider_id": provider_id})
        return json_response({"results": results})


def receipt(call: Call, message: dict, delivered: bool) -> Receipt:
    return Receipt(
        message["id"], message["to"], message.get("subject"), call.started, delivered, call.sender, call.number
    )


def json_response(body: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(body), status=status, headers=headers, content_type="application/json")
