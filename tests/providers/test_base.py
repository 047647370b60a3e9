"""The shared plumbing: rate-limit headers, HTTP failures, per-message results, send_groups."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from providers import registry
from providers.base import (
    ConfigurationError,
    HttpClient,
    InvalidToken,
    Outbound,
    Outcome,
    PermanentError,
    ProviderError,
    RateLimited,
    SendResult,
    SuppressRecipient,
    TransientError,
    Unreachable,
    Unsubscribed,
    addresses,
    one_by_one,
    retry_after_seconds,
    send_groups,
    wait_from_headers,
)
from tests.providers.helpers import emails


def test_retry_after_in_seconds():
    assert retry_after_seconds("12") == 12.0


def test_retry_after_as_http_date():
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 <= retry_after_seconds(when) <= 30


def test_retry_after_missing_or_garbage_uses_the_default():
    assert retry_after_seconds(None) == 1.0
    assert retry_after_seconds("soon", default=5.0) == 5.0


@pytest.mark.parametrize(
    ("headers", "low", "high"),
    [
        ({"Retry-After": "7"}, 7, 7),
        ({"RateLimit-Reset": "3"}, 3, 3),  # IETF draft (Resend): seconds until the reset
        ({"Retry-After": "2", "RateLimit-Reset": "30"}, 2, 2),  # Retry-After wins
        ({}, 1, 1),
    ],
)
def test_wait_from_headers(headers, low, high):
    assert low <= wait_from_headers(headers) <= high


def test_wait_from_an_x_ratelimit_reset_time():
    """SendGrid sends a Unix time, not a number of seconds."""
    assert 18 <= wait_from_headers({"X-RateLimit-Reset": str(int(time.time()) + 20)}) <= 20


@pytest.mark.parametrize(
    ("error", "outcome", "suppress", "invalid_token", "retry_after"),
    [
        (PermanentError("no"), Outcome.PERMANENT, None, False, None),
        (SuppressRecipient("inactive"), Outcome.PERMANENT, "bounce", False, None),
        (Unsubscribed("STOP"), Outcome.PERMANENT, "unsubscribe", False, None),
        (InvalidToken("gone"), Outcome.PERMANENT, None, True, None),
        (TransientError("5xx"), Outcome.TRANSIENT, None, False, None),
        (RateLimited("429", 4.0), Outcome.RATE_LIMITED, None, False, 4.0),
        (ConfigurationError("bad key"), Outcome.CONFIGURATION, None, False, None),
    ],
)
def test_an_error_becomes_a_result_that_says_what_to_do(error, outcome, suppress, invalid_token, retry_after):
    """`suppress`: the reason the address is suppressed for, None when it is not."""
    result = SendResult.from_error("m1", error)
    assert (result.outcome, result.suppress_reason, result.invalid_token, result.retry_after) == (
        outcome,
        suppress,
        invalid_token,
        retry_after,
    )
    assert result.suppress is (suppress is not None)
    assert result.error == str(error)


def test_configuration_errors_are_not_retryable_but_pause_the_provider():
    assert not ConfigurationError.retryable
    assert ConfigurationError.provider_wide and RateLimited.provider_wide and Unreachable.provider_wide
    assert not PermanentError.provider_wide and not TransientError.provider_wide


def test_outbound_keeps_its_positional_order():
    message = Outbound("m1", "email", "a@example.com", "Subject", "text", "<p>html</p>", {"k": "v"})
    assert (message.subject, message.html, message.metadata) == ("Subject", "<p>html</p>", {"k": "v"})
    assert (message.from_address, message.reply_to, dict(message.headers), message.data) == (
        None,
        None,
        {},
        None,
    )


class Scripted:
    """A stand-in provider call that fails the messages it is told to, as a provider would."""

    def __init__(self, failures: dict[str, ProviderError]):
        self.failures = failures
        self.calls: list[list[str]] = []

    def __call__(self, group: Sequence[Outbound]) -> list[SendResult]:
        self.calls.append([m.message_id for m in group])
        for message in group:
            if message.message_id in self.failures:
                raise self.failures[message.message_id]
        return [SendResult(m.message_id, Outcome.SENT, provider_message_id=f"p-{m.message_id}") for m in group]


def test_send_groups_keeps_going_after_a_message_error():
    call = Scripted({"m2": SuppressRecipient("inactive"), "m3": TransientError("busy")})
    results = send_groups(one_by_one(emails(4)), call)
    assert [(r.message_id, r.outcome, r.suppress) for r in results] == [
        ("m1", Outcome.SENT, False),
        ("m2", Outcome.PERMANENT, True),
        ("m3", Outcome.TRANSIENT, False),
        ("m4", Outcome.SENT, False),
    ]


@pytest.mark.parametrize("error", [RateLimited("429", 9.0), ConfigurationError("paused"), Unreachable("down")])
def test_a_provider_wide_error_before_anything_went_out_is_raised(error):
    call = Scripted({"m1": error})
    with pytest.raises(type(error)):
        send_groups(one_by_one(emails(3)), call)
    assert call.calls == [["m1"]]


def test_a_provider_wide_error_midway_keeps_what_was_sent_and_stops():
    call = Scripted({"m2": RateLimited("429", 9.0)})
    results = send_groups([[m] for m in emails(2)] + [emails(4)[2:]], call)
    assert [(r.message_id, r.outcome, r.retry_after) for r in results] == [
        ("m1", Outcome.SENT, None),
        ("m2", Outcome.RATE_LIMITED, 9.0),
        ("m3", Outcome.RATE_LIMITED, 9.0),
        ("m4", Outcome.RATE_LIMITED, 9.0),
    ]
    assert call.calls == [["m1"], ["m2"]]


# -- HttpClient against real sockets ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, PermanentError),
        (404, PermanentError),
        (422, PermanentError),
        (401, ConfigurationError),
        (403, ConfigurationError),
        (408, TransientError),
        (500, TransientError),
        (503, TransientError),
        (429, RateLimited),
    ],
)
def test_status_mapping(httpserver: HTTPServer, status, kind):
    httpserver.expect_request("/x").respond_with_data("nope", status)
    with pytest.raises(ProviderError) as raised:
        HttpClient(httpserver.url_for("")).post_json("/x", {})
    assert type(raised.value) is kind
    assert raised.value.response.status_code == status


def test_redirects_are_not_followed(httpserver: HTTPServer):
    httpserver.expect_request("/x").respond_with_data("", 302, {"Location": httpserver.url_for("/y")})
    with pytest.raises(PermanentError, match="HTTP 302"):
        HttpClient(httpserver.url_for("")).post_json("/x", {})


def test_connection_refused_is_unreachable_not_ambiguous():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(Unreachable) as raised:
        HttpClient(f"http://127.0.0.1:{port}").post_json("/x", {})
    assert not raised.value.ambiguous


@pytest.fixture
def full_backlog() -> Iterator[int]:
    """A port whose accept queue is full, so a new connection's SYN goes unanswered."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(server.getsockname())
        fillers.append(filler)
    yield server.getsockname()[1]
    for s in [*fillers, server]:
        s.close()


def test_connect_timeout_is_unreachable_not_ambiguous(full_backlog: int):
    with pytest.raises(Unreachable, match="could not connect") as raised:
        HttpClient(f"http://127.0.0.1:{full_backlog}", timeout=0.3).post_json("/x", {})
    assert not raised.value.ambiguous


def test_read_timeout_is_transient_and_logged_as_ambiguous(httpserver: HTTPServer, caplog):
    def slow(request: Request) -> Response:
        time.sleep(0.6)
        return Response("{}")

    httpserver.expect_request("/x").respond_with_handler(slow)
    with caplog.at_level(logging.WARNING, logger="providers.base"), pytest.raises(TransientError) as raised:
        HttpClient(httpserver.url_for(""), timeout=0.2).post_json("/x", {})
    assert raised.value.ambiguous and not raised.value.provider_wide
    assert "may have been accepted" in caplog.text


@pytest.fixture
def hang_up_server() -> Iterator[int]:
    """A server that reads the request and closes the connection without answering."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(5)
    port = server.getsockname()[1]

    def serve() -> None:
        try:
            connection, _ = server.accept()
        except OSError:
            return
        connection.recv(65536)
        connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    server.close()
    thread.join(5)


def test_a_connection_dropped_after_the_request_left_is_ambiguous(hang_up_server: int):
    with pytest.raises(TransientError) as raised:
        HttpClient(f"http://127.0.0.1:{hang_up_server}").post_json("/x", {"a": 1})
    assert raised.value.ambiguous
    assert not isinstance(raised.value, Unreachable)


def test_an_unreadable_success_is_ambiguous(httpserver: HTTPServer):
    httpserver.expect_request("/x").respond_with_data("<html>ok</html>", 200)
    with pytest.raises(TransientError) as raised:
        HttpClient(httpserver.url_for("")).post_json("/x", {})
    assert raised.value.ambiguous


def test_only_adapters_that_send_attachments_say_so():
    assert {name for name in registry.names() if registry.carries_attachments(name)} == {
        "log",
        "postmark",
        "resend",
        "sendgrid",
        "ses",
        "simulator",
        "smtp",
    }


def test_an_address_header_splits_into_its_addresses():
    assert addresses('a@x.example, "Bo, B." <b@y.example>,, Zoë <z@y.example>') == [
        "a@x.example",
        '"Bo, B." <b@y.example>',
        "Zoë <z@y.example>",
    ]
