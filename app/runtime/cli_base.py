"""What every `tidings` command shares: settings checked first, and errors as one line.

A missing or malformed setting, an unreachable database, input the API's schemas refuse
and the API's own 4xx answers all end a command with one line on stderr and exit status
2, never a traceback.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import click
from marshmallow import ValidationError
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from werkzeug.exceptions import HTTPException

from app.config import ConfigError, Settings


def fail(message: str) -> None:
    click.echo(f"tidings: {message}", err=True)
    sys.exit(2)


def one_line_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except ConfigError as error:
            fail(str(error))
        except OperationalError as error:
            fail(f"cannot reach PostgreSQL: {str(error.orig).strip().splitlines()[0]}")
        except ValidationError as error:
            fail(f"invalid input: {_field_errors(error.messages)}")
        except HTTPException as error:
            data = getattr(error, "data", None) or {}
            errors = data.get("errors")
            fail(
                data.get("message", error.description or error.name) + (f" ({_field_errors(errors)})" if errors else "")
            )

    return wrapper


def _field_errors(errors: Any, path: str = "") -> str:
    """Marshmallow's nested field errors as one line: `to.email: Not a valid email address.`"""
    if isinstance(errors, dict):
        return "; ".join(_field_errors(value, f"{path}.{key}" if path else str(key)) for key, value in errors.items())
    if isinstance(errors, list) and all(isinstance(item, str) for item in errors):
        return f"{path}: {' '.join(errors)}" if path else " ".join(errors)
    return f"{path}: {errors}"


def load_settings() -> Settings:
    settings = Settings.from_env()
    check_database(settings.database_url)
    return settings


def check_database(database_url: str) -> None:
    engine = create_engine(database_url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    finally:
        engine.dispose()
