"""Anyone may post to /v1/inbound/*: a body over 1 MiB is refused with 413 before a byte of it
is read, whether it announces its length or comes chunked."""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.serving import make_server

from tests.api.inbound.conftest import postmark_headers

EIGHT_MIB = 8 * 1024 * 1024
CHUNK = 64 * 1024
ROUTES = ["/v1/inbound/postmark", "/v1/inbound/ses", "/v1/inbound/twilio", "/v1/inbound/resend/some-project"]


@pytest.fixture(scope="module")
def inbound_live(inbound_app) -> Iterator[str]:
    """The webhook-receiving API over real HTTP on 127.0.0.1, for bodies a test client cannot send."""
    server = make_server("127.0.0.1", 0, inbound_app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def refused_count(inbound) -> float:
    """Requests the receivers turned away: a body they had read would have been one (401)."""
    families = text_string_to_metric_families(inbound.get("/metrics").get_data(as_text=True))
    [events] = [family for family in families if family.name == "tidings_inbound_events"]
    return sum(s.value for s in events.samples if s.labels["outcome"].startswith("refused_"))


def answer_of(sock: socket.socket) -> tuple[int, dict]:
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, json.loads(response.read())


def request_head(base_url: str, path: str, **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {urlsplit(base_url).netloc}", "Content-Type: application/json"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def connect(base_url: str) -> socket.socket:
    url = urlsplit(base_url)
    return socket.create_connection((url.hostname, url.port), timeout=10)


@pytest.mark.parametrize("path", ROUTES)
def test_an_eight_mebibyte_body_is_413_unread(inbound, path):
    before = refused_count(inbound)
    answer = inbound.post(path, data=b"{" + b" " * EIGHT_MIB + b"}", headers=postmark_headers())
    assert answer.status_code == 413
    assert answer.get_json()["code"] == 413 and answer.get_json()["message"]
    assert refused_count(inbound) == before


def test_a_large_content_length_is_answered_before_the_body_is_sent(inbound_live):
    """The request announces 8 MiB and sends none of it: an answer at all means nothing waited to read it."""
    with connect(inbound_live) as sock:
        sock.sendall(request_head(inbound_live, "/v1/inbound/postmark", Content_Length=str(EIGHT_MIB)))
        status, body = answer_of(sock)
    assert (status, body["code"]) == (413, 413)


def test_a_chunked_body_is_cut_off_at_the_cap(inbound, inbound_live):
    """No Content-Length: the read stops at 1 MiB and answers 413; the client stops sending
    once it sees the answer (the server closes, so later chunks may meet a reset)."""
    before = refused_count(inbound)
    chunk = b"%x\r\n%s\r\n" % (CHUNK, b" " * CHUNK)
    with connect(inbound_live) as sock:
        sock.sendall(request_head(inbound_live, "/v1/inbound/postmark", Transfer_Encoding="chunked"))
        try:
            for _ in range(EIGHT_MIB // CHUNK):
                if select.select([sock], [], [], 0)[0]:
                    break  # the answer is here
                sock.sendall(chunk)
            else:
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, body = answer_of(sock)
    assert (status, body["code"]) == (413, 413)
    assert refused_count(inbound) == before
