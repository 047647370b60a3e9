"""Every API request: a request id, one access log line, and its count and time for `/metrics`.

Counts are buffered per process and flushed to the shared Redis hash at most once a
second (and before every scrape), so a request costs no extra round trip.
"""

from __future__ import annotations

import logging
import time

from flask import Flask, Response, g, request

from app.api.context import context
from app.observability import logs
from app.observability.counters import BufferedTally, Tally

access_log = logging.getLogger("tidings.access")

request_tally = BufferedTally(interval=1.0)
# Labels take only values we chose: a path no route matches is one series, and so is any
# method but the standard ones (a client may send `BREW`, or `A|B`, on any route).
UNMATCHED = "<unmatched>"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER_METHOD = "other"


def install(app: Flask) -> None:
    app.before_request(_start)
    app.after_request(_finish)


def _start() -> None:
    g.started = time.perf_counter()
    logs.reset(request_id=logs.request_id_from(request.headers.get(logs.HEADER)))


def _finish(response: Response) -> Response:
    started = getattr(g, "started", None)
    if started is None:
        return response
    seconds = time.perf_counter() - started
    route = request.url_rule.rule if request.url_rule is not None else UNMATCHED
    method = request.method if request.method in METHODS else OTHER_METHOD
    tally = Tally()
    tally.count("http_requests", method=method, route=route, status=str(response.status_code))
    tally.observe("http_request_seconds", [seconds], method=method, route=route)
    request_tally.add(context().redis, tally)
    caller = getattr(g, "caller", None)
    if caller is not None:
        logs.bind(project=caller.project_id)
    access_log.info(
        "%s %s %s",
        request.method,
        request.path,
        response.status_code,
        extra={"route": route, "status": response.status_code, "duration_ms": round(seconds * 1000, 2)},
    )
    response.headers[logs.HEADER] = logs.current()["request_id"]
    return response
