"""A local server shaped like Resend's API that honours `Idempotency-Key` as Resend does.

`POST /emails` and `POST /emails/batch` (up to 100). Resend keeps a key for 24 hours: the
same key with the same body is answered with the first answer and nothing is sent again;
the same key with another body is refused (409 `invalid_idempotent_request`), and while
the first request with a key is still being handled a second is refused too (409
`concurrent_idempotent_requests`). So a repeat is safe only as the very same request.

The ledger records every email the server sent, by the message id our adapter tags it with,
so a test counts deliveries per message; `replays` counts requests answered from a key.
`hold` parks chosen requests open until released, for a test that kills the caller mid-call.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from providers.base import MESSAGE_ID_TAG

# Longer than any test: a held request that nobody releases still ends.
HOLD_SECONDS = 120.0


class ResendServer:
    def __init__(self) -> None:
        self.server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.sent: list[str] = []  # message ids, one per email sent
        self.carried: list[str] = []  # message ids, one per request that carried the message
        self.replays = 0
        self.requests = 0
        self._answers: dict[str, tuple[str, dict[str, Any]]] = {}  # key -> (body, first answer)
        self._in_flight: set[str] = set()
        self._lock = threading.Lock()
        self._release = threading.Event()
        self.held = 0  # requests parked open by `hold`, now or before
        self.held_ids: list[str] = []  # the message ids those requests carried
        self.open = 0  # requests being handled (and not refused) right now
        # Which requests to park (by its 1-based number); None parks none.
        self.hold: Callable[[int], bool] | None = None

    @property
    def url(self) -> str:
        return self.server.url_for("")

    def start(self) -> ResendServer:
        self.server.start()
        self.server.expect_request("/emails", method="POST").respond_with_handler(self._single)
        self.server.expect_request("/emails/batch", method="POST").respond_with_handler(self._batch)
        return self

    def stop(self) -> None:
        self.release()
        self.server.stop()

    def release(self) -> None:
        """Let every held request go on (and none be held from now on)."""
        self.hold = None
        self._release.set()

    def deliveries(self) -> Counter:
        with self._lock:
            return Counter(self.sent)

    def appearances(self) -> Counter:
        """How many requests carried each message, repeats and refusals included."""
        with self._lock:
            return Counter(self.carried)

    def _single(self, request: Request) -> Response:
        return self._keyed(request, lambda email: {"id": self._send(email)})

    def _batch(self, request: Request) -> Response:
        return self._keyed(request, lambda emails: {"data": [{"id": self._send(e)} for e in emails]})

    def _keyed(self, request: Request, send: Callable[[Any], dict[str, Any]]) -> Response:
        """Answer as Resend does for a request with an Idempotency-Key (every request of ours has one)."""
        key, body = request.headers.get("Idempotency-Key", ""), request.get_data(as_text=True)
        with self._lock:
            self.requests += 1
            self.carried.extend(message_ids(json.loads(body)))
            if key in self._in_flight:
                return resend_error(409, "concurrent_idempotent_requests")
            if key in self._answers:
                first_body, answer = self._answers[key]
                if first_body != body:
                    return resend_error(409, "invalid_idempotent_request")
                self.replays += 1
                return json_answer(answer)
            self._in_flight.add(key)
            self.open += 1
            hold = self.hold is not None and self.hold(self.requests)
            if hold:
                self.held += 1
                self.held_ids.extend(message_ids(json.loads(body)))
        try:
            if hold:
                self._release.wait(HOLD_SECONDS)
            answer = send(json.loads(body))
            with self._lock:
                self._answers[key] = (body, answer)
            return json_answer(answer)
        finally:
            with self._lock:
                self._in_flight.discard(key)
                self.open -= 1

    def _send(self, email: dict[str, Any]) -> str:
        [message_id] = message_ids(email)
        with self._lock:
            self.sent.append(message_id)
        return str(uuid.uuid4())


def message_ids(body: dict[str, Any] | list[dict[str, Any]]) -> list[str]:
    """Our message ids in a request's emails (one email, or a batch), from the tag our adapter sets."""
    emails = body if isinstance(body, list) else [body]
    return [tag["value"] for email in emails for tag in email.get("tags", []) if tag["name"] == MESSAGE_ID_TAG]


def json_answer(body: object) -> Response:
    return Response(json.dumps(body), status=200, content_type="application/json")


def resend_error(status: int, name: str, message: str = "details") -> Response:
    return Response(json.dumps({"statusCode": status, "name": name, "message": message}), status)
