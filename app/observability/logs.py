"""Structured logs: one JSON line per event, carrying the request id from the API into the tasks.

The API takes the caller's `X-Request-ID` (or makes one), puts it on every log line of
the request and on every task the request publishes, as a message header; the worker
puts it, with the task id and name, on every line the task logs, and on the tasks that
task publishes in turn. So one grep for a request id finds the HTTP request, its
prepare and its deliver, on whichever machines they ran. A prepare task that carries the
sends of several requests (app/delivery/coalescer.py) carries their ids as a list.
"""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from collections.abc import Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from celery.signals import before_task_publish, task_postrun, task_prerun

from app.config import ConfigError

FORMATS = ("json", "text")
HEADER = "X-Request-ID"
TASK_HEADER = "tidings_request_id"
# A caller's id is kept when it is short and plain; anything else is replaced, not echoed.
ACCEPTABLE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,100}$")

_context: ContextVar[Mapping[str, Any]] = ContextVar("tidings_log_context", default=MappingProxyType({}))
# Every attribute a LogRecord has of its own; anything else on a record came in `extra`.
_RECORD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def bind(**fields: Any) -> None:
    """Add fields to every line logged from here on, in this request or task."""
    _context.set({**_context.get(), **fields})


def reset(**fields: Any) -> None:
    """Start a request's or a task's context afresh (threads are reused)."""
    _context.set(fields)


def current() -> Mapping[str, Any]:
    return _context.get()


def request_id_from(value: str | None) -> str:
    return value if value and ACCEPTABLE_ID.match(value) else uuid.uuid4().hex


class JsonFormatter(logging.Formatter):
    """One line of JSON: time, level, logger, message, the bound context, and any `extra`."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **current(),
        }
        line.update({key: value for key, value in vars(record).items() if key not in _RECORD_FIELDS})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure(environ: Mapping[str, str] | None = None) -> None:
    """Root logging for a `tidings` process: JSON unless TIDINGS_LOG_FORMAT=text."""
    env = os.environ if environ is None else environ
    kind = env.get("TIDINGS_LOG_FORMAT", "json").strip() or "json"
    if kind not in FORMATS:
        raise ConfigError(f"TIDINGS_LOG_FORMAT must be json or text; got {kind!r}")
    handler = logging.StreamHandler()
    if kind == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


@before_task_publish.connect
def _carry_request_id(headers: dict[str, Any] | None = None, **_: Any) -> None:
    request_id = current().get("request_id")
    if headers is not None and request_id:
        headers.setdefault(TASK_HEADER, request_id)


@task_prerun.connect
def _bind_task(task_id: str | None = None, task: Any = None, args: tuple = (), **_: Any) -> None:
    """Each task logs with its id, name and the request that caused it; one message's id
    when the task carries one (a batch's ids are logged by what handles them)."""
    fields: dict[str, Any] = {"task_id": task_id, "task": getattr(task, "name", None)}
    request_id = getattr(task.request, TASK_HEADER, None) if task is not None else None
    if request_id:
        fields["request_id"] = request_id
    ids = next((arg for arg in args if isinstance(arg, list)), None)
    if ids is not None and len(ids) == 1:
        fields["message_id"] = ids[0]
    reset(**fields)


@task_postrun.connect
def _unbind_task(**_: Any) -> None:
    reset()
