"""A local stand-in for the providers, for load, soak and fault tests.

It speaks the `fake` adapter's batch format and mimics the request paths and answers of
Resend, Postmark, SendGrid and Twilio, so the real adapters can be pointed at it
(RESEND_BASE_URL=http://127.0.0.1:9900 …). Every answer waits a latency drawn from a
range; a share of requests fails with 503, a share of messages is rejected the way each
provider rejects an address, and 429 bursts (with Retry-After) come and go. A ledger
counts every accepted message by our message id, so a test can prove nothing was sent
twice or lost:

    GET  /ledger              {"requests", "accepted", "rejected", "duplicates", "statuses", "messages": {id: count}}
    GET  /ledger/feed?after=N {"next", "entries": [[unix time, id], …]}: acceptances from the Nth on
    POST /reset               empty the ledger and end any burst

The feed lets a soak follow deliveries as they happen (to answer with opens and clicks,
and to time accept → provider) without fetching the whole ledger every second.

    python loadtest/fake_provider.py --port 9900 --latency 150-250 --transient-rate 0.03

It binds 127.0.0.1 only, and serves each request on its own thread, so hundreds of
slow requests can be in flight at once, as they would be against a real provider.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs


@dataclass(frozen=True)
class Behaviour:
    latency: tuple[float, float] = (0.150, 0.250)  # seconds, drawn uniformly per request
    transient_rate: float = 0.0  # share of requests answered 503
    permanent_rate: float = 0.0  # share of messages rejected as a bad address
    burst_rate: float = 0.0  # chance per request that a 429 burst starts
    burst_seconds: float = 2.0  # how long a burst lasts; its Retry-After counts down


@dataclass
class Answer:
    status: int
    body: Any = None
    headers: dict[str, str] | None = None


FEED_PAGE = 20_000  # acceptances per feed answer: a soak's backlog catches up in a few calls


class Ledger:
    """What the fake provider accepted, by our message id (or the recipient, for Twilio)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.accepted: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()
        self.rejected = 0
        self.feed: list[tuple[float, str]] = []

    def record(self, status: int, accepted: list[str], rejected: int) -> None:
        now = time.time()
        with self.lock:
            self.statuses[status] += 1
            self.accepted.update(accepted)
            self.rejected += rejected
            self.feed.extend((now, key) for key in accepted)

    def entries(self, after: int) -> dict[str, Any]:
        """Acceptances from position `after` on, at most FEED_PAGE of them, and where to go on from."""
        with self.lock:
            page = self.feed[after : after + FEED_PAGE]
        return {"next": after + len(page), "entries": page}

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": sum(self.statuses.values()),
                "accepted": sum(self.accepted.values()),
                "rejected": self.rejected,
                "duplicates": sum(1 for count in self.accepted.values() if count > 1),
                "statuses": {str(status): count for status, count in sorted(self.statuses.items())},
                "messages": dict(self.accepted),
            }


class FakeProvider:
    """The shared state of one server: behaviour, randomness, the current burst, the ledger."""

    def __init__(self, behaviour: Behaviour, seed: int | None = None):
        self.behaviour = behaviour
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.burst_until = 0.0
        self.ledger = Ledger()
        # Resend replays the answer to a repeated Idempotency-Key instead of sending again.
        self.idempotent: dict[str, Answer] = {}

    def chance(self, rate: float) -> bool:
        with self.lock:
            return self.random.random() < rate

    def latency(self) -> float:
        with self.lock:
            return self.random.uniform(*self.behaviour.latency)

    def refusal(self) -> Answer | None:
        """A 429 while a burst lasts (one may start now), a 503 at the transient rate."""
        now = time.monotonic()
        with self.lock:
            if now >= self.burst_until and self.random.random() < self.behaviour.burst_rate:
                self.burst_until = now + self.behaviour.burst_seconds
            left = self.burst_until - now
        if left > 0:
            return Answer(429, {"message": "Too many requests"}, {"Retry-After": str(math.ceil(left))})
        if self.chance(self.behaviour.transient_rate):
            return Answer(503, {"message": "Service unavailable"})
        return None

    def reset(self) -> None:
        with self.lock:
            self.burst_until = 0.0
            self.idempotent.clear()
        self.ledger.reset()


def new_id(prefix: str = "") -> str:
    return prefix + uuid.uuid4().hex


# -- one function per provider format: request → (answer, accepted keys, rejected count) ----

Result = tuple[Answer, list[str], int]


def fake_batch(provider: FakeProvider, body: Any) -> Result:
    results, accepted = [], []
    for message in body["messages"]:
        if provider.chance(provider.behaviour.permanent_rate):
            results.append({"id": message["id"], "status": "rejected", "error": "invalid recipient"})
        else:
            results.append({"id": message["id"], "status": "accepted", "provider_id": new_id("fake-")})
            accepted.append(message["id"])
    return Answer(200, {"results": results}), accepted, len(results) - len(accepted)


def resend_key(email: dict) -> str:
    tags = {tag.get("name"): tag.get("value") for tag in email.get("tags") or []}
    return tags.get("tidings_message_id") or ",".join(email["to"] if isinstance(email["to"], list) else [email["to"]])


def resend_one(provider: FakeProvider, body: Any) -> Result:
    if provider.chance(provider.behaviour.permanent_rate):
        error = {"statusCode": 422, "name": "validation_error", "message": "Invalid `to` field."}
        return Answer(422, error), [], 1
    return Answer(200, {"id": str(uuid.uuid4())}), [resend_key(body)], 0


def resend_batch(provider: FakeProvider, body: Any) -> Result:
    data, errors, accepted = [], [], []
    for index, email in enumerate(body):
        if provider.chance(provider.behaviour.permanent_rate):
            errors.append({"index": index, "message": "Invalid `to` field."})
        else:
            data.append({"id": str(uuid.uuid4())})
            accepted.append(resend_key(email))
    return Answer(200, {"data": data, "errors": errors}), accepted, len(errors)


def postmark_answer(provider: FakeProvider, email: dict) -> tuple[dict, str | None]:
    key = (email.get("Metadata") or {}).get("tidings_message_id") or email["To"]
    if provider.chance(provider.behaviour.permanent_rate):
        message = "You tried to send to recipient(s) that have been marked as inactive."
        return {"ErrorCode": 406, "Message": message}, None
    answer = {
        "To": email["To"],
        "SubmittedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "MessageID": str(uuid.uuid4()),
        "ErrorCode": 0,
        "Message": "OK",
    }
    return answer, key


def postmark_one(provider: FakeProvider, body: Any) -> Result:
    answer, key = postmark_answer(provider, body)
    return Answer(200 if key else 422, answer), [key] if key else [], 0 if key else 1


def postmark_batch(provider: FakeProvider, body: Any) -> Result:
    answers = [postmark_answer(provider, email) for email in body]
    accepted = [key for _, key in answers if key]
    return Answer(200, [answer for answer, _ in answers]), accepted, len(answers) - len(accepted)


def sendgrid_send(provider: FakeProvider, body: Any) -> Result:
    """Like SendGrid, one invalid personalization fails the whole request, naming its field."""
    personalizations = body["personalizations"]
    bad = [i for i in range(len(personalizations)) if provider.chance(provider.behaviour.permanent_rate)]
    if bad:
        errors = [
            {"message": "Does not contain a valid address.", "field": f"personalizations.{i}.to.0.email"} for i in bad
        ]
        return Answer(400, {"errors": errors}), [], len(bad)
    keys = [(p.get("custom_args") or {}).get("tidings_message_id") or p["to"][0]["email"] for p in personalizations]
    return Answer(202, None, {"X-Message-Id": new_id()[:22]}), keys, 0


def twilio_message(provider: FakeProvider, form: Any) -> Result:
    if provider.chance(provider.behaviour.permanent_rate):
        error = {
            "code": 21211,
            "message": f"The 'To' number {form['To']} is not a valid phone number.",
            "more_info": "https://www.twilio.com/docs/errors/21211",
            "status": 400,
        }
        return Answer(400, error), [], 1
    sid = new_id("SM")
    answer = {
        "sid": sid,
        "status": "queued",
        "to": form["To"],
        "from": form.get("From"),
        "body": form.get("Body"),
    }
    return Answer(201, answer), [form["To"]], 0


Route = Callable[[FakeProvider, Any], Result]
ROUTES: list[tuple[re.Pattern[str], Route]] = [
    (re.compile(r"^/messages$"), fake_batch),
    (re.compile(r"^/emails$"), resend_one),
    (re.compile(r"^/emails/batch$"), resend_batch),
    (re.compile(r"^/email$"), postmark_one),
    (re.compile(r"^/email/batch$"), postmark_batch),
    (re.compile(r"^/v3/mail/send$"), sendgrid_send),
    (re.compile(r"^/2010-04-01/Accounts/[^/]+/Messages\.json$"), twilio_message),
]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as adapters pool their connections
    server: Server

    def log_message(self, format: str, *args: Any) -> None:  # one line per request is too many
        pass

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        ledger = self.server.provider.ledger
        if path == "/ledger":
            self.reply(Answer(200, ledger.snapshot()))
        elif path == "/ledger/feed":
            after = parse_qs(query).get("after", ["0"])[0]
            if after.isdigit():
                self.reply(Answer(200, ledger.entries(int(after))))
            else:
                self.reply(Answer(400, {"message": "after must be a position (0 or more)"}))
        else:
            self.reply(Answer(404, {"message": "not found"}))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path == "/reset":
            self.server.provider.reset()
            self.reply(Answer(204))
            return
        route = next((route for pattern, route in ROUTES if pattern.match(self.path)), None)
        if route is None:
            self.reply(Answer(404, {"message": f"no route for {self.path}"}))
            return
        provider = self.server.provider
        time.sleep(provider.latency())
        refusal = provider.refusal()
        answer, accepted, rejected = (refusal, [], 0) if refusal else self.answer_for(provider, route, raw)
        provider.ledger.record(answer.status, accepted, rejected)
        self.reply(answer)

    def answer_for(self, provider: FakeProvider, route: Route, raw: bytes) -> Result:
        key = self.headers.get("Idempotency-Key")
        if key and key in provider.idempotent:
            return provider.idempotent[key], [], 0
        if self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
            body = {name: values[0] for name, values in parse_qs(raw.decode()).items()}
        else:
            try:
                body = json.loads(raw or b"null")
            except ValueError:
                return Answer(400, {"message": "invalid JSON"}), [], 0
        answer, accepted, rejected = route(provider, body)
        if key and answer.status < 300:
            provider.idempotent[key] = answer
        return answer, accepted, rejected

    def reply(self, answer: Answer) -> None:
        payload = b"" if answer.body is None else json.dumps(answer.body).encode()
        self.send_response(answer.status)
        for name, value in (answer.headers or {}).items():
            self.send_header(name, value)
        if payload:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a burst of new connections waits in the backlog, not refused

    def __init__(self, port: int, provider: FakeProvider):
        super().__init__(("127.0.0.1", port), Handler)
        self.provider = provider

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def milliseconds_range(value: str) -> tuple[float, float]:
    low, _, high = value.partition("-")
    try:
        bounds = (float(low) / 1000, float(high or low) / 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LOW-HIGH in milliseconds, got {value!r}") from None
    if not 0 <= bounds[0] <= bounds[1]:
        raise argparse.ArgumentTypeError(f"expected 0 <= LOW <= HIGH, got {value!r}")
    return bounds


def rate(value: str) -> float:
    number = float(value)
    if not 0 <= number <= 1:
        raise argparse.ArgumentTypeError(f"a rate is between 0 and 1, got {value}")
    return number


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=9900, help="0 picks a free port (default 9900)")
    parser.add_argument("--latency", type=milliseconds_range, default=(0.150, 0.250), help="ms, e.g. 150-250")
    parser.add_argument("--transient-rate", type=rate, default=0.0, help="share of requests answered 503")
    parser.add_argument("--permanent-rate", type=rate, default=0.0, help="share of messages rejected")
    parser.add_argument("--burst-rate", type=rate, default=0.0, help="chance per request of a 429 burst")
    parser.add_argument("--burst-seconds", type=float, default=2.0, help="length of a 429 burst")
    parser.add_argument("--seed", type=int, default=None, help="for a reproducible run")
    args = parser.parse_args(argv)
    behaviour = Behaviour(args.latency, args.transient_rate, args.permanent_rate, args.burst_rate, args.burst_seconds)
    server = Server(args.port, FakeProvider(behaviour, args.seed))
    print(f"fake provider listening on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
