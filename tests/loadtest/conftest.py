"""Benchmarks run as their command lines against a database and a Redis of their own.

Their own Redis keeps the session's in-process worker, which consumes the same queue names
with other settings, from taking their tasks; their own database keeps their sweepers off
every other test's rows, and theirs out of the session's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from app.runtime.embedded import EmbeddedRedis
from tests.databases import database, engine

__all__ = ["database", "engine"]  # a database of each benchmark's own (tests/databases.py)


@pytest.fixture
def bench_env(database: str) -> Iterator[dict[str, str]]:
    """The environment to run a benchmark script in."""
    redis_server = EmbeddedRedis().start()
    yield {**os.environ, "DATABASE_URL": database, "REDIS_URL": redis_server.url}
    redis_server.stop(kill=True)
