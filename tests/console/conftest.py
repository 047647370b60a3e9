"""Signing a Flask test client in to the console, and reading what pages show."""

from __future__ import annotations

import re

from flask.testing import FlaskClient
from werkzeug.test import TestResponse

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(page: TestResponse) -> str:
    found = CSRF.search(page.get_data(as_text=True))
    assert found, page.get_data(as_text=True)[:500]
    return found.group(1)


def sign_in(client: FlaskClient, key: str) -> TestResponse:
    """Sign in through the form, as a person would: the sign-in page's token, then the key."""
    token = csrf_of(client.get("/console/login"))
    return client.post("/console/login", data={"key": key, "csrf_token": token})


def token(client: FlaskClient) -> str:
    """The signed-in session's CSRF token, as every form of the console carries it."""
    return csrf_of(client.get("/console/messages"))
