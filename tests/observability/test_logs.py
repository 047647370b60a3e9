"""Structured logs: one JSON line per event, the request id carried from the API into the tasks."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from app.config import ConfigError
from app.observability import logs
from tests.conftest import email
from tests.provider_server import json_response
from tests.waiting import wait_until


class Lines(logging.Handler):
    """Every record formatted as production formats it, kept as parsed JSON."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logs.JsonFormatter())
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        assert "\n" not in line
        self.lines.append(json.loads(line))


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    loggers = [logging.getLogger(name) for name in ("tidings.access", "tasks")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    yield handler
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(handler)
        logger.setLevel(level)


def test_a_line_has_the_context_and_the_extra_fields():
    handler = Lines()
    logger = logging.getLogger("tidings.test")
    logger.addHandler(handler)
    try:
        logs.reset(request_id="r-1")
        logs.bind(project="acme")
        logger.warning("it %s", "happened", extra={"message_id": "m-1"})
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed")
    finally:
        logs.reset()
        logger.removeHandler(handler)
    first, second = handler.lines
    assert first["message"] == "it happened"
    assert (first["level"], first["request_id"], first["project"], first["message_id"]) == (
        "warning",
        "r-1",
        "acme",
        "m-1",
    )
    assert "ValueError: boom" in second["exception"]


def test_request_ids_are_kept_when_plain_and_replaced_otherwise():
    assert logs.request_id_from("req-42.a:b") == "req-42.a:b"
    assert logs.request_id_from("two words") != "two words"
    assert len(logs.request_id_from(None)) == 32


def test_a_bad_log_format_is_refused():
    with pytest.raises(ConfigError, match="TIDINGS_LOG_FORMAT"):
        logs.configure({"TIDINGS_LOG_FORMAT": "xml"})


@pytest.mark.usefixtures("worker")
def ours_from_instrument(line: dict, message_id: str) -> bool:
    return line["logger"] == "tasks.instrument" and line.get("message_id") == message_id


@pytest.mark.usefixtures("worker")
def test_the_request_id_follows_the_message_into_the_tasks(project, fake_provider, lines):
    fake_provider.override = lambda request: json_response(
        {
            "results": [
                {"id": m["id"], "status": "rejected", "error": "no such mailbox"} for m in request.json["messages"]
            ]
        }
    )
    answer = project.send(email(), **{"X-Request-ID": "req-trace-1"})
    assert answer.headers["X-Request-ID"] == "req-trace-1"
    message_id = answer.get_json()["id"]
    assert project.wait_for(message_id)["status"] == "failed"
    wait_until(
        lambda: lines.lines,
        lambda seen: any(ours_from_instrument(line, message_id) for line in seen),
        10,
        f"the delivery's log line for {message_id}",
        show=len,
    )

    access = next(line for line in lines.lines if line["logger"] == "tidings.access")
    assert (access["request_id"], access["project"], access["message_id"], access["status"]) == (
        "req-trace-1",
        project.id,
        message_id,
        202,
    )
    # Other tests' retries may land meanwhile: pick this message's batch line.
    batch = next(line for line in lines.lines if ours_from_instrument(line, message_id) and line["level"] == "info")
    assert (batch["request_id"], batch["message_id"], batch["outcomes"]) == ("req-trace-1", message_id, {"failed": 1})
    failed = next(line for line in lines.lines if line.get("message_id") == message_id and line["level"] == "warning")
    assert failed["request_id"] == "req-trace-1"
    assert failed["task"] == "tidings.deliver_next"
    assert failed["task_id"]
    assert failed["project"] == project.id
    assert "no such mailbox" in failed["message"]


def test_every_response_has_a_request_id(client):
    assert len(client.get("/healthz").headers["X-Request-ID"]) == 32
