"""The operations page (admin): providers with pace, pause and circuit breaker; lanes and
queues with what waits; dead letters to requeue; a link to Flower. One digest call reads
it all, as `GET /v1/admin/digest` does."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for

from app.console.blueprint import blp, read_form
from app.console.messages import requeue_dead
from app.console.session import admin_page, tidings
from app.schemas.core import PauseSchema
from app.services import digest, operations

pause_schema = PauseSchema()


@blp.route("/operations", endpoint="operations")
@admin_page
def operations_page():
    ctx = tidings()
    numbers = digest.digest(ctx.db, ctx.settings, ctx.redis)
    flower = f"{request.scheme}://{request.host.rpartition(':')[0] or request.host}:{ctx.settings.flower_port}/"
    totals = sorted(numbers["totals"].items())
    return render_template(
        "console/operations.html",
        digest=numbers,
        totals=totals,
        most=max((count for _, count in totals), default=0),
        flower=flower,
        errors={},
    )


@blp.route("/operations/providers/<name>/pause", methods=["POST"])
@admin_page
def pause_provider(name: str):
    pause, errors = read_form(pause_schema, request.form)
    if pause is None:
        flash(f"Not paused: {errors}")
    else:
        ctx = tidings()
        operations.set_pause(ctx.settings, ctx.redis, name, pause)
        flash(f"Paused {name}.")
    return redirect(url_for("console.operations"))


@blp.route("/operations/providers/<name>/resume", methods=["POST"])
@admin_page
def resume_provider(name: str):
    ctx = tidings()
    operations.set_pause(ctx.settings, ctx.redis, name, None)
    flash(f"Resumed {name}.")
    return redirect(url_for("console.operations"))


@blp.route("/operations/dead-letters/requeue", methods=["POST"])
@admin_page
def requeue_project_dead_letters():
    """Every dead letter of one project (up to the service's limit a call) sent again."""
    requeue_dead(request.form.get("project", ""), None)
    return redirect(url_for("console.operations"))
