"""Console pages for signing in and out, and the admin's choice of project."""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import redirect, render_template, request, url_for

from app.console.blueprint import blp
from app.console.session import admin_page, choose_project, current_viewer, sign_in, sign_out, tidings
from app.services import projects


@blp.route("/login", methods=["GET", "POST"])
def login():
    if request.method == "GET":
        return render_template("console/login.html", failed=False, next=request.args.get("next", ""))
    viewer = sign_in(request.form.get("key", "").strip())
    if viewer is None:
        return render_template("console/login.html", failed=True, next=request.form.get("next", "")), 401
    landing = url_for("console.operations") if viewer.admin else url_for("console.messages")
    return redirect(local_path(request.form.get("next", "")) or landing)


def local_path(target: str) -> str | None:
    """Where to go after sign-in: a console path only, never another site (open redirect)."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/console/") or "\\" in target:
        return None
    return target


@blp.route("/logout", methods=["POST"])
def logout():
    sign_out()
    return redirect(url_for("console.login"))


@blp.route("/")
def home():
    viewer = current_viewer()
    if viewer is None:
        return redirect(url_for("console.login"))
    return redirect(url_for("console.messages"))


@blp.route("/projects", methods=["GET", "POST"], endpoint="projects")
@admin_page
def projects_page():
    """Every project, and which one the project pages show (the admin's pick)."""
    db = tidings().db
    if request.method == "POST":
        chosen = projects.get_project(db, request.form.get("project", ""))
        choose_project(chosen.id)
        return redirect(url_for("console.messages"))
    return render_template("console/projects.html", projects=projects.list_projects(db))
