"""Migrations: one head, and the models say exactly what the migrations built."""

from __future__ import annotations

from alembic import command
from alembic.script import ScriptDirectory

from app.runtime.migrate import alembic_config


def test_one_head(migrated):
    assert len(ScriptDirectory.from_config(alembic_config(migrated.database_url)).get_heads()) == 1


def test_models_match_migrations(migrated):
    command.check(alembic_config(migrated.database_url))
