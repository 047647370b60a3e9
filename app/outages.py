"""What an outage looks like: one classification of errors for the API and the workers alike.

A database, Redis or broker that is away (or overloaded, or a transaction that lost a race)
is nobody's mistake and passes by itself: a task retries its whole batch (tasks/isolation.py),
a request answers 503 with Retry-After (app/errors.py), and neither mistakes it for a bug or
for one row's bad data. It is decided by who caused the error, not by its class alone:
psycopg2 calls an index row too large or a numeric field overflow an OperationalError, yet
one row's data caused it.
"""

from __future__ import annotations

import kombu.exceptions
import psycopg2
import redis
import sqlalchemy.exc
from werkzeug.exceptions import ServiceUnavailable

# Redis and broker trouble, and a pool with no connection free: always the service's.
SERVICE_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
    kombu.exceptions.OperationalError,
    sqlalchemy.exc.TimeoutError,  # no connection free in the pool
    sqlalchemy.exc.DisconnectionError,
)
# SQLSTATE classes and codes of the server's trouble, not a row's: connection exceptions,
# insufficient resources, shutdowns, and lost races (serialization failure, deadlock).
SERVICE_CLASSES = ("08", "53")
SERVICE_CODES = ("57P01", "57P02", "57P03", "40001", "40P01")

# Database errors that, without a SQLSTATE, can only mean the connection is gone.
CONNECTION_ERRORS = (
    sqlalchemy.exc.OperationalError,
    sqlalchemy.exc.InterfaceError,
    psycopg2.OperationalError,
    psycopg2.InterfaceError,
)

# What a client is told to wait: a restart or failover of PostgreSQL or Redis takes seconds.
RETRY_AFTER_SECONDS = 5


def unavailable(error: BaseException) -> bool:
    """Whether `error` means a service we need is away or overloaded, rather than a bug or the data's fault.

    A database error is the service's when its connection was lost (invalidated, or a
    driver's connection error with no SQLSTATE) or when its SQLSTATE names the server's trouble.
    """
    if isinstance(error, SERVICE_ERRORS):
        return True
    if isinstance(error, sqlalchemy.exc.DBAPIError) and error.connection_invalidated:
        return True
    driver = error.orig if isinstance(error, sqlalchemy.exc.DBAPIError) else error
    code = getattr(driver, "pgcode", None)
    if code is None:
        return isinstance(error, CONNECTION_ERRORS)
    return code[:2] in SERVICE_CLASSES or code in SERVICE_CODES


def one_line(error: BaseException) -> str:
    """The error's class and first line: an outage is logged as what happened, without a traceback,
    since it is no bug to debug (drivers' messages run to several lines of hints)."""
    driver = error.orig if isinstance(error, sqlalchemy.exc.DBAPIError) else error
    lines = str(driver).strip().splitlines()
    return f"{type(driver).__name__}: {lines[0] if lines else ''}"


class Unavailable(ServiceUnavailable):
    """A request that needed a service while it was away: 503, retry after RETRY_AFTER_SECONDS, nothing written."""

    def __init__(self) -> None:
        message = (
            "A service this request needs (the database, Redis or the broker) is unavailable; "
            f"retry after {RETRY_AFTER_SECONDS} seconds."
        )
        super().__init__(message, retry_after=RETRY_AFTER_SECONDS)
        self.data = {"message": message, "headers": {"Retry-After": str(RETRY_AFTER_SECONDS)}}
