"""Databases of their own on the session's PostgreSQL server, cloned from one migrated template.

Every process that runs a sweeper scans the whole database it is given, so a test that
starts one gets a database nobody else writes to: no earlier test's unfinished rows for its
sweeper to pick up, none of its own left for a later one. Migrating costs about a second;
`CREATE DATABASE … TEMPLATE` costs tens of milliseconds, so the template is migrated once
per session (per pytest-xdist worker) and every database after it is a copy.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from app.runtime import migrate


class Databases:
    """Copies of a migrated template, each named `{prefix}_…` on the server of `server_url`.

    `server_url`'s own database is only where the CREATE and DROP statements are sent from;
    nothing is written to it. The template has no connection of its own once migrated, as
    PostgreSQL requires of a template while it is copied."""

    def __init__(self, server_url: str, prefix: str):
        self.server_url = server_url
        self.prefix = prefix
        self.template = f"{prefix}_template"
        self._admin = create_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)

    def url(self, name: str) -> str:
        return make_url(self.server_url).set(database=name).render_as_string(hide_password=False)

    def migrate_template(self) -> None:
        """The template anew, at the migrations' head (a template of an earlier run may be behind)."""
        self.drop(self.template)
        self._execute(f'CREATE DATABASE "{self.template}"')
        migrate.upgrade(self.url(self.template))

    @contextmanager
    def own(self) -> Iterator[str]:
        """The URL of a copy of the template for a session, module or test, dropped after it,
        its connections and all."""
        name = f"{self.prefix}_{secrets.token_hex(4)}"
        self._execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        try:
            yield self.url(name)
        finally:
            self.drop(name)

    def drop(self, name: str) -> None:
        self._execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        self.drop(self.template)
        self._admin.dispose()

    def _execute(self, statement: str) -> None:
        with self._admin.connect() as connection:
            connection.execute(text(statement))


@pytest.fixture
def database(databases: Databases) -> Iterator[str]:
    """A database of the test's own: the sweepers of the processes it starts find its rows and
    no one else's. Conftests that start processes (tests/faults, tests/loadtest) import it."""
    with databases.own() as url:
        yield url


@pytest.fixture
def engine(database: str) -> Iterator[Engine]:
    """The test's own database (overrides the session's `engine` where `database` is imported)."""
    engine = create_engine(database)
    yield engine
    engine.dispose()
