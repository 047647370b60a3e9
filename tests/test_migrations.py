"""Migrations: one head, the models say exactly what the migrations built, and every status
column admits its enum's values and no others."""

from __future__ import annotations

import re

import pytest
import sqlalchemy.exc
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from app.models import STATUS_COLUMNS, status_check_name
from app.runtime.migrate import alembic_config
from tests.faults.stack import insert_accepted, new_project, statuses


def test_one_head(migrated):
    assert len(ScriptDirectory.from_config(alembic_config(migrated.database_url)).get_heads()) == 1


def test_models_match_migrations(migrated):
    command.check(alembic_config(migrated.database_url))


def allowed_values(engine: Engine, table: str, column: str) -> set[str]:
    """The values the database's CHECK constraint on `table.column` admits."""
    with engine.connect() as connection:
        definition = connection.execute(
            text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :name"),
            {"name": status_check_name(table, column)},
        ).scalar_one()
    return set(re.findall(r"'([^']*)'", definition))


@pytest.mark.parametrize(("table", "column"), list(STATUS_COLUMNS))
def test_each_status_column_admits_exactly_its_enum(engine, table, column):
    assert allowed_values(engine, table, column) == {member.value for member in STATUS_COLUMNS[table, column]}


def test_a_misspelt_status_is_refused_by_the_database(engine):
    project = new_project(engine)
    try:
        (message_id,) = insert_accepted(engine, project, 1)
        with pytest.raises(sqlalchemy.exc.IntegrityError, match="ck_messages_status"), engine.begin() as connection:
            connection.execute(
                text("UPDATE messages SET status = 'sendng' WHERE id = CAST(:id AS uuid)"), {"id": message_id}
            )
        assert statuses(engine, [message_id]) == {message_id: "accepted"}
    finally:  # no worker or sweeper of a later test may find the row
        with engine.begin() as connection:
            connection.execute(text("DELETE FROM projects WHERE id = :id"), {"id": project})
