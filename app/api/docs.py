"""`/docs`: Swagger UI on /openapi.json, every file served by Tidings itself.

Its assets come from the `flask-swagger-ui` package, pinned in pyproject.toml, so the page
works behind a firewall and the script a person pastes the admin key into is the one that
was installed, not whatever a CDN serves today. Our page and its initializer are files of
our own (app/api/docs_files), with no inline script, so the Content-Security-Policy allows
only scripts from this origin.
"""

from __future__ import annotations

from pathlib import Path

import flask_swagger_ui
from flask import Blueprint, Response, send_from_directory

from app.page_headers import page_headers

ASSETS = Path(flask_swagger_ui.__file__).parent / "dist"
PAGES = Path(__file__).parent / "docs_files"

# Swagger UI sets style attributes as it renders, hence inline styles (never scripts).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = page_headers(CONTENT_SECURITY_POLICY)

blp = Blueprint("docs", __name__, url_prefix="/docs")


@blp.after_request
def secure(response: Response) -> Response:
    response.headers.update(SECURITY_HEADERS)
    return response


@blp.route("", methods=["GET"])
def page() -> Response:
    return send_from_directory(PAGES, "index.html", max_age=0)


@blp.route("/init.js", methods=["GET"])
def initializer() -> Response:
    return send_from_directory(PAGES, "init.js", max_age=0)


@blp.route("/assets/<path:name>", methods=["GET"])
def asset(name: str) -> Response:
    """Swagger UI's own files; a name outside its folder is a 404 (send_from_directory sees to it)."""
    return send_from_directory(ASSETS, name)
