"""Every API request: timed and counted for `/metrics`.

Counts are buffered per process and flushed to the shared Redis hash at most once a
second (and before every scrape), so a request costs no extra round trip.
"""

from __future__ import annotations

import time

from flask import Flask, Response, g, request

from app.api import context
from app.counters import BufferedTally, Tally

request_tally = BufferedTally(interval=1.0)
UNMATCHED = "<unmatched>"


def install(app: Flask) -> None:
    app.before_request(_start)
    app.after_request(_finish)


def _start() -> None:
    g.started = time.perf_counter()


def _finish(response: Response) -> Response:
    started = getattr(g, "started", None)
    if started is None:
        return response
    route = request.url_rule.rule if request.url_rule is not None else UNMATCHED
    tally = Tally()
    tally.count("http_requests", method=request.method, route=route, status=str(response.status_code))
    tally.observe("http_request_seconds", [time.perf_counter() - started], method=request.method, route=route)
    request_tally.add(context().redis, tally)
    return response
