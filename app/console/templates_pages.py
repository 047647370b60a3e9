"""Console pages for templates: the list, a version, and the editor whose preview follows
every key pressed (rendered by the service, in the sandbox sends use); saving makes a version."""

from __future__ import annotations

from typing import Any

from flask import flash, jsonify, redirect, render_template, request, url_for

from app.console.blueprint import blp, read_form
from app.console.session import project_page, tidings
from app.content.rendering import FIELDS
from app.schemas.audience import TemplateCreateSchema, TemplateUpdateSchema
from app.services import templates

# The fields a person types; a push template's `data` and a webhook's `payload` are JSON,
# kept from the version edited.
TEXT_FIELDS = ("subject", "title", "text", "body", "html")
PAGE_SIZE = 100

update_schema = TemplateUpdateSchema()
create_schema = TemplateCreateSchema()


@blp.route("/templates", endpoint="templates", methods=["GET", "POST"])
@project_page
def templates_page(project_id: str):
    db = tidings().db
    if request.method == "POST":
        data, errors = read_form(create_schema, request.form)
        if data is not None:
            created = templates.create(db, project_id, data)
            return redirect(url_for("console.template_page", key=created["key"]))
        flash(f"Not created: {errors}")
    listed = templates.list_page(db, project_id, request.args.get("cursor"), PAGE_SIZE)
    return render_template("console/templates.html", page=listed, channels=sorted(FIELDS))


@blp.route("/templates/<key>", methods=["GET", "POST"])
@project_page
def template_page(project_id: str, key: str):
    """A version (latest, or `?version=`) in a locale, and the editor to make the next one."""
    db = tidings().db
    if request.method == "POST":
        current = templates.get(db, project_id, key, None, request.form.get("locale") or None)
        data, errors = read_form(update_schema, {**kept_fields(current), **editable(request.form)})
        if data is None:
            flash(f"Not saved: {errors}")
        else:
            saved = templates.update(db, project_id, key, data)
            flash(f"Saved as version {saved['version']}.")
        return redirect(url_for("console.template_page", key=key, locale=request.form.get("locale") or None))
    version = request.args.get("version", type=int)
    shown = templates.get(db, project_id, key, version, request.args.get("locale"))
    latest = shown if version is None else templates.get(db, project_id, key, None, shown["locale"])
    return render_template(
        "console/template.html",
        template=shown,
        latest_version=latest["version"],
        fields=[field for field in FIELDS[shown["channel"]] if field in TEXT_FIELDS],
    )


def editable(form: Any) -> dict[str, str]:
    """The typed fields and the locale, as the update schema takes them."""
    return {name: form[name] for name in (*TEXT_FIELDS, "locale") if form.get(name)}


def kept_fields(current: dict[str, Any]) -> dict[str, Any]:
    """JSON fields the editor does not show, carried into the new version as they were."""
    return {name: current[name] for name in ("data", "payload") if current.get(name) is not None}


@blp.route("/templates/<key>/preview", methods=["POST"])
@project_page
def preview_template(project_id: str, key: str):
    """JSON for the editor's script: {fields, data} rendered, or the error with its fields."""
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or not isinstance(body.get("fields"), dict) or not isinstance(body.get("data"), dict):
        return jsonify(message="Send {fields: {...}, data: {...}}."), 400
    db = tidings().db
    current = templates.get(db, project_id, key, None, body["fields"].get("locale") or None)
    fields, errors = read_form(update_schema, {**kept_fields(current), **editable(body["fields"])})
    if fields is None:
        return jsonify(message="Invalid template.", errors=errors), 422
    return jsonify(templates.preview_draft(db, project_id, key, fields, body["data"]))
