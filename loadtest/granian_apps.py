"""The two apps loadtest/singles.py compares, as factories for granian's `--factory`, named
as its processes are: `api`, ours as `tidings api` builds it, and `bare`, the bare endpoint
(loadtest/bare_api.py). Both take their settings from the environment the harness gives
the server."""

from __future__ import annotations

import bare_api
from flask import Flask

from app.api import create_app
from app.runtime.cli_base import load_settings


def api() -> Flask:
    return create_app(load_settings())


def bare() -> Flask:
    return bare_api.create_app(load_settings())
