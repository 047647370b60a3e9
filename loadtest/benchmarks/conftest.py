"""The test suite's PostgreSQL fixtures, for the benchmarks that need a database.

Imported rather than copied, so a benchmark's database is set up exactly as the tests'
is: DATABASE_URL / REDIS_URL when set, embedded servers otherwise, migrations once per
session into a template the benchmark's database is copied from. Benchmarks that ask for
no database start none.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.conftest import (
    backup_provider,
    databases,
    engine,
    fake_provider,
    migrated,
    server_urls,
    servers,
    settings,
)

__all__ = ["backup_provider", "databases", "engine", "fake_provider", "migrated", "server_urls", "servers", "settings"]
