"""Bounded exchanges against servers that answer badly on purpose: what a call reads, how
long it may last (counted in what a dripping server got to send), and what it keeps."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
from pytest_httpserver import HTTPServer

from providers.base import HttpClient, PermanentError, TransientError
from providers.bounded import ANSWER_LIMIT, DeadlinePassed, bound, exchange
from tests.hostile_server import BOMB_PATTERN, DRIP_EVERY, ENDLESS_CHUNK, HostileServer

DEADLINE = 1.0
# What a server dripping a byte every DRIP_EVERY seconds can send within DEADLINE, plus the
# writes it needs to learn that the client hung up.
DRIPPED_AT_MOST = int(DEADLINE / DRIP_EVERY) + 3


def session() -> requests.Session:
    return bound(requests.Session())


def test_an_endless_body_is_cut_at_the_limit_and_its_connection_closed(hostile: HostileServer):
    answer = exchange(session(), "GET", hostile.url("endless"), DEADLINE)
    assert (answer.status_code, answer.oversize, len(answer.content)) == (200, True, ANSWER_LIMIT)
    assert answer.content == (ENDLESS_CHUNK * 2)[:ANSWER_LIMIT]
    hostile.wait_hung_up("endless")


def test_a_gzip_bomb_is_decoded_no_further_than_the_limit(hostile: HostileServer):
    answer = exchange(session(), "GET", hostile.url("bomb"), DEADLINE)
    assert (answer.oversize, len(answer.content)) == (True, ANSWER_LIMIT)
    assert answer.content == BOMB_PATTERN[:ANSWER_LIMIT]
    [(request, _)] = hostile.server.log
    assert request.headers["Accept-Encoding"] == "identity"  # we asked for no compression at all


def test_a_dripping_body_costs_the_deadline_and_no_more(hostile: HostileServer):
    with pytest.raises(DeadlinePassed, match="no complete answer within 1s"):
        exchange(session(), "GET", hostile.url("drip"), DEADLINE)
    hostile.wait_hung_up("drip")
    assert hostile.stats("drip").offered <= DRIPPED_AT_MOST


@dataclass
class HeaderDripper:
    """A raw server that answers its status line and headers one byte every DRIP_EVERY seconds."""

    port: int
    sent: int = 0  # bytes sent until the client hung up
    done: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def header_dripper() -> Iterator[HeaderDripper]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(5)
    dripper = HeaderDripper(server.getsockname()[1])
    stop = threading.Event()

    def serve() -> None:
        try:
            connection, _ = server.accept()
        except OSError:
            return
        connection.recv(65536)
        try:
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 1200:  # ten minutes at most
                connection.sendall(bytes([byte]))
                dripper.sent += 1
                if stop.wait(DRIP_EVERY):  # the server's pace
                    break
        except OSError:
            pass  # the client hung up
        connection.close()
        dripper.done.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield dripper
    stop.set()
    thread.join(5)
    server.close()


def test_dripping_headers_cost_the_deadline_too(header_dripper: HeaderDripper):
    """A per-read timeout never fires on a byte every half second; the deadline does."""
    with pytest.raises(DeadlinePassed):
        exchange(session(), "GET", f"http://127.0.0.1:{header_dripper.port}/", DEADLINE)
    assert header_dripper.done.wait(10), "the dripper never noticed the hang-up"
    assert header_dripper.sent <= DRIPPED_AT_MOST


def test_nul_bytes_never_reach_an_excerpt(hostile: HostileServer):
    answer = exchange(session(), "GET", hostile.url("nul", 500), DEADLINE)
    assert answer.content == b"refused\x00\x00 by the receiver"
    assert answer.excerpt(300) == "refused\ufffd\ufffd by the receiver"
    with pytest.raises(TransientError) as raised:
        HttpClient(hostile.base).post_json("/nul?status=500", {})
    assert str(raised.value) == "HTTP 500: refused\ufffd\ufffd by the receiver"


def test_json_strings_are_stored_without_nul_or_lone_surrogates(httpserver: HTTPServer):
    body = '{"code": "x\\u0000y", "items": ["\\ud800", {"k\\u0000": 1}]}'
    httpserver.expect_request("/x").respond_with_data(body, content_type="application/json")
    answer = HttpClient(httpserver.url_for("")).post_json("/x", {})
    assert answer == {"code": "x\ufffdy", "items": ["\ufffd", {"k\ufffd": 1}]}


@pytest.mark.parametrize("behaviour", ["endless", "bomb"])
def test_a_success_too_long_to_parse_is_ambiguous_and_says_why(hostile: HostileServer, behaviour):
    with pytest.raises(TransientError, match="answer over 64 KiB") as raised:
        HttpClient(hostile.base, timeout=DEADLINE).post_json(f"/{behaviour}", {})
    assert raised.value.ambiguous


def test_a_dripping_provider_is_ambiguous(hostile: HostileServer):
    with pytest.raises(TransientError, match="no complete answer within 1s") as raised:
        HttpClient(hostile.base, timeout=DEADLINE).post_json("/drip", {})
    assert raised.value.ambiguous and not raised.value.provider_wide


def test_an_error_answer_too_long_to_parse_is_decided_by_its_status(hostile: HostileServer):
    with pytest.raises(PermanentError) as raised:
        HttpClient(hostile.base, timeout=DEADLINE).post_json("/endless?status=400", {})
    assert str(raised.value) == "HTTP 400: " + (ENDLESS_CHUNK[:500]).decode()


class KeepAliveHandler(BaseHTTPRequestHandler):
    """Answers every POST with a little JSON over HTTP/1.1, keeping the connection open
    (werkzeug's server closes each one), and notes the client's port."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.server.ports.append(self.client_address[1])  # type: ignore[attr-defined]
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def keep_alive_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), KeepAliveHandler)
    server.ports = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_an_answer_read_to_its_end_keeps_the_connection_for_the_next_call(keep_alive_server: ThreadingHTTPServer):
    client = HttpClient(f"http://127.0.0.1:{keep_alive_server.server_port}")
    assert [client.post_json("/x", {}) for _ in range(3)] == [{"ok": True}] * 3
    assert len(keep_alive_server.ports) == 3 and len(set(keep_alive_server.ports)) == 1  # type: ignore[attr-defined]
