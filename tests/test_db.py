"""Connections of our engine: a transaction left idle gives its locks back, a connection
the server closed is never handed out, one the pool opened is kept for the next burst, and
a process builds one engine however many threads ask at once."""

from __future__ import annotations

import threading
import uuid
from contextlib import ExitStack

from sqlalchemy import Engine, make_url, text

from app.db import POOL_SIZE, engine_for, new_engine
from tests.waiting import wait_until


def test_every_connection_limits_idle_transactions(migrated):
    with engine_for(migrated.database_url).connect() as connection:
        assert connection.execute(text("SHOW idle_in_transaction_session_timeout")).scalar() == "1min"


def test_the_server_ends_a_transaction_its_process_left_idle(migrated):
    engine = engine_for(migrated.database_url)
    silent = engine.connect()
    silent.execute(text("SET idle_in_transaction_session_timeout = '100ms'"))  # the minute, shortened
    pid = silent.execute(text("SELECT pg_backend_pid()")).scalar()  # and now it holds a transaction, silent
    try:
        wait_until(
            lambda: backend_state(engine, pid),
            lambda state: state is None,
            10,
            "the server to end the idle transaction's backend",
        )
    finally:
        silent.invalidate()
        silent.close()


def test_a_pooled_connection_the_server_closed_is_replaced_at_checkout(migrated):
    """A restart or a terminated backend leaves dead connections in the pool; with no ping
    per checkout, the first query on one would fail unless checkout noticed."""
    engine = new_engine(migrated.database_url)  # a pool of its own, holding one connection
    try:
        with engine.connect() as connection:
            pid = connection.execute(text("SELECT pg_backend_pid()")).scalar()
        with engine_for(migrated.database_url).connect() as other:
            assert other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar()
        wait_until(
            lambda: backend_state(engine_for(migrated.database_url), pid),
            lambda state: state is None,
            10,
            "the terminated backend to exit",
        )
        with engine.connect() as connection:
            assert connection.execute(text("SELECT pg_backend_pid()")).scalar() != pid
    finally:
        engine.dispose()


def test_every_connection_a_burst_opened_serves_the_next_burst(migrated):
    """A new backend costs PostgreSQL a fork and cold caches: a pool that closed what a burst
    opened beyond its size opened them again at the next burst (31 a second in the soak)."""
    engine = new_engine(migrated.database_url)  # a pool of its own

    def burst() -> set[int]:
        """The server's backend for each of POOL_SIZE connections checked out at once."""
        with ExitStack() as held:
            connections = [held.enter_context(engine.connect()) for _ in range(POOL_SIZE)]
            return {c.execute(text("SELECT pg_backend_pid()")).scalar() for c in connections}

    try:
        first = burst()
        assert len(first) == POOL_SIZE
        assert burst() == first
    finally:
        engine.dispose()


def test_threads_asking_at_once_share_one_engine(migrated):
    """A process that starts under load: every thread asks for the engine at the same
    moment, and each engine built beside the kept one would open a pool of its own."""
    fresh = {"application_name": f"tidings-{uuid.uuid4().hex[:8]}"}  # a URL no engine was built for yet
    url = make_url(migrated.database_url).update_query_dict(fresh).render_as_string(hide_password=False)
    threads = 32
    start = threading.Barrier(threads)
    engines: list[Engine] = []

    def ask() -> None:
        start.wait(10)
        engines.append(engine_for(url))

    workers = [threading.Thread(target=ask) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(10)
    assert len(engines) == threads
    assert len({id(engine) for engine in engines}) == 1


def backend_state(engine, pid: int) -> str | None:
    """What pg_stat_activity says of backend `pid` now (a new transaction: a fresh snapshot)."""
    with engine.connect() as connection:
        return connection.execute(text("SELECT state FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}).scalar()
