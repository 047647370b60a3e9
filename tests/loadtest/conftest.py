"""Benchmarks run as their command lines against the session's PostgreSQL and a Redis of their own.

Their own Redis keeps the session's in-process worker, which consumes the same queue names
with other settings, from taking their tasks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from app.config import Settings
from app.runtime.embedded import EmbeddedRedis


@pytest.fixture
def bench_env(migrated: Settings) -> Iterator[dict[str, str]]:
    """The environment to run a benchmark script in."""
    redis_server = EmbeddedRedis().start()
    yield {**os.environ, "DATABASE_URL": migrated.database_url, "REDIS_URL": redis_server.url}
    redis_server.stop(kill=True)
