"""Engine and sessions, and the outbox that publishes tasks only after a commit.

A task published inside a transaction can run before the rows it names are visible, or
name rows a rollback never wrote. So services queue signatures on the session and the
`after_commit` hook publishes them; a rollback drops them.
"""

from __future__ import annotations

import logging
import select
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Protocol, TypeVar

from sqlalchemy import Engine, Row, create_engine, event, exc
from sqlalchemy.orm import Session, sessionmaker

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Publishable(Protocol):
    """What the outbox publishes: a Celery Signature, or a project's fair bulk chunks
    (app/delivery/fairness.py), which go to Redis before their tokens go to the broker."""

    @property
    def task(self) -> str | None: ...
    def apply_async(self, **options: Any) -> Any: ...


def rows_as(kind: Callable[..., T], rows: Iterable[Row[Any]]) -> list[T]:
    """Rows of hand-written SQL as the named type its module declares beside it, built by
    column name: the type checker knows every field, and a column the SQL and the type name
    differently fails on the first row, not as an AttributeError wherever it is read."""
    return [kind(**row._mapping) for row in rows]


# Connections each process keeps at most. Every one the pool opens it keeps: a connection
# closed on return (SQLAlchemy's overflow) is opened again by the next burst, and each new
# PostgreSQL backend costs a fork and cold caches (a send's first INSERT on a new backend
# took 6.5 ms against 0.4 ms warm). With 10 kept and 10 more closed on return, the 400/s
# soak opened 31 backends a second. At most as many as before: a thread that finds all
# of them in use waits for one (pool_timeout), as it did past the overflow.
POOL_SIZE = 20


_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def engine_for(database_url: str) -> Engine:
    """One pooled engine per URL and process (forked children build their own).

    Built under a lock: the threads of a process that starts under load all ask at once,
    and each engine built beside the kept one opened connections beyond POOL_SIZE (51
    backends for a pool of 20 in one probe)."""
    with _engines_lock:  # asked once per process and URL, by session_factory's cache
        if database_url not in _engines:
            _engines[database_url] = new_engine(database_url)
        return _engines[database_url]


def new_engine(database_url: str) -> Engine:
    """A pool of its own; everything else shares `engine_for`'s."""
    engine = create_engine(
        database_url,
        pool_size=POOL_SIZE,
        max_overflow=0,
        connect_args={
            "connect_timeout": 5,
            "application_name": "tidings",
            # A server that vanished (a host cut off, a NAT that forgot us) is noticed in
            # about a minute, not the two hours of the kernel's defaults.
            "keepalives": 1,
            "keepalives_idle": 30,
            "keepalives_interval": 10,
            "keepalives_count": 3,
        },
    )
    event.listen(engine, "connect", _limit_idle_transactions)
    event.listen(engine, "checkout", _discard_if_closed_by_server)
    return engine


def _discard_if_closed_by_server(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Hand out no connection the server has closed (a restart, an idle backend terminated).

    An idle pooled connection has nothing to read until the server ends it, which sends a
    last error and closes the socket, so a readable socket means a dead connection; asking
    the kernel costs one poll, where a ping per checkout (pool_pre_ping) cost a round trip
    and about a tenth of a single send's CPU. The pool reconnects on DisconnectionError.
    A server that vanished without closing is found by the keepalives `engine_for` sets.
    """
    if dbapi_connection.closed:
        raise exc.DisconnectionError("the connection is closed")
    poller = select.poll()
    poller.register(dbapi_connection.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
    if poller.poll(0):
        raise exc.DisconnectionError("the server closed the connection")


def _limit_idle_transactions(dbapi_connection: Any, _record: Any) -> None:
    """A transaction whose process went silent (killed, or its host cut off) gives its row
    locks back after a minute, so the sweeper's SKIP LOCKED and other workers' claims do
    not wait on it for hours. No transaction of ours idles that long: provider calls and
    broker publishes happen outside them. Set per connection, not as a startup option,
    which connection poolers such as PgBouncer refuse."""
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SET idle_in_transaction_session_timeout = '60s'")
    dbapi_connection.commit()


@lru_cache(maxsize=8)
def session_factory(database_url: str) -> sessionmaker[Session]:
    return sessionmaker(engine_for(database_url), expire_on_commit=False)


@contextmanager
def session_scope(database_url: str) -> Iterator[Session]:
    """A session that commits when the block ends normally and rolls back otherwise."""
    with session_factory(database_url)() as session, session.begin():
        yield session


def enqueue_after_commit(session: Session, signature: Publishable) -> None:
    session.info.setdefault("outbox", []).append(signature)


def publish(signature: Publishable) -> bool:
    """Publish a task for committed rows now, retrying once; False if the broker would not take it.

    A failure is logged and not raised: the rows are committed, so nothing is lost, and
    the sweeper re-dispatches them once they have waited STALLED_AFTER_SECONDS.
    """
    try:
        signature.apply_async(retry=True, retry_policy={"max_retries": 1, "interval_start": 0})
    except Exception:
        logger.warning("could not publish %s; the sweeper will pick it up", signature.task, exc_info=True)
        return False
    return True


@event.listens_for(Session, "after_commit")
def _publish_outbox(session: Session) -> None:
    for signature in session.info.pop("outbox", []):
        publish(signature)


@event.listens_for(Session, "after_rollback")
def _drop_outbox(session: Session) -> None:
    session.info.pop("outbox", None)
