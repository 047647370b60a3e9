"""How many rows an INSERT, UPDATE or DELETE changed, through a session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import CursorResult, Executable
from sqlalchemy.orm import Session


def changed_rows(session: Session, statement: Executable, params: Mapping[str, Any] | None = None) -> int:
    """Run a data-changing statement and count its rows, as `Session.execute` is typed for any
    statement and only a statement that changes data answers with a count (a CursorResult)."""
    return cast(CursorResult[Any], session.execute(statement, params)).rowcount
