"""Project routes for templates: versions, locale variants, preview."""

from __future__ import annotations

from typing import Any

from flask import g

from app.api import contract
from app.api.context import context
from app.api.project import project_blueprint
from app.pagination import PageArgsSchema
from app.schemas.audience import (
    PreviewOutSchema,
    PreviewSchema,
    TemplateCreateSchema,
    TemplateGetArgsSchema,
    TemplatePageSchema,
    TemplateSchema,
    TemplateUpdateSchema,
)
from app.services import templates

blp = project_blueprint("templates", __name__, contract.AUDIENCE, "Versioned, sandboxed Jinja2 templates.")


@blp.route("/templates", methods=["POST"])
@blp.arguments(TemplateCreateSchema)
@blp.response(201, TemplateSchema)
@blp.alt_response(409)
def create_template(data: dict[str, Any]):
    """Create a template.

    Version 1 of a template; its locale (default en) is the fallback for every other.
    """
    return templates.create(context().db, g.caller.project_id, data)


@blp.route("/templates/<key>", methods=["PUT"])
@blp.arguments(TemplateUpdateSchema)
@blp.response(200, TemplateSchema)
@blp.alt_response(409)
def update_template(data: dict[str, Any], key: str):
    """Update a template.

    The next version: this locale's words replaced, the other locales carried over.
    """
    return templates.update(context().db, g.caller.project_id, key, data)


@blp.route("/templates/<key>", methods=["GET"])
@blp.arguments(TemplateGetArgsSchema, location="query")
@blp.response(200, TemplateSchema)
def get_template(args: dict[str, Any], key: str):
    """Get a template.

    The latest version, or `?version=`; `?locale=` picks a variant (with fallback).
    """
    return templates.get(context().db, g.caller.project_id, key, args.get("version"), args.get("locale"))


@blp.route("/templates", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query")
@blp.response(200, TemplatePageSchema)
def list_templates(args: dict[str, Any]):
    """List templates.

    The latest version of every template, by key.
    """
    return templates.list_page(context().db, g.caller.project_id, args.get("cursor"), args["limit"])


@blp.route("/templates/<key>/preview", methods=["POST"])
@blp.arguments(PreviewSchema)
@blp.response(200, PreviewOutSchema)
def preview_template(body: dict[str, Any], key: str):
    """Preview a template.

    Render with `data` as a send would; SMS answers its length and segment count too.
    """
    return templates.preview(context().db, g.caller.project_id, key, body)
