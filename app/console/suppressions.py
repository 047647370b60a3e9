"""Console page for the suppression list: list, add, remove (the API's service functions)."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for

from app.console.blueprint import blp, read_form
from app.console.session import project_page, tidings
from app.enums import Channel, SuppressionReason
from app.schemas.audience import SuppressionCreateSchema, SuppressionListArgsSchema
from app.services import suppressions

create_schema = SuppressionCreateSchema()
list_schema = SuppressionListArgsSchema()


@blp.route("/suppressions", endpoint="suppressions", methods=["GET", "POST"])
@project_page
def suppressions_page(project_id: str):
    db = tidings().db
    if request.method == "POST":
        data, errors = read_form(create_schema, request.form)
        if data is None:
            flash(f"Not added: {errors}")
        else:
            row, _ = suppressions.create(db, project_id, data)
            flash(f"Suppressed {row.address} ({data['channel'].value}).")
        return redirect(url_for("console.suppressions"))
    args, errors = read_form(list_schema, request.args)
    listed = (
        suppressions.list_page(db, project_id, args.get("channel"), args.get("cursor"), args["limit"])
        if args
        else {"items": [], "next_cursor": None}
    )
    return render_template(
        "console/suppressions.html",
        page=listed,
        errors=errors,
        channel=request.args.get("channel", ""),
        channels=[c.value for c in Channel],
        reasons=[r.value for r in SuppressionReason],
    )


@blp.route("/suppressions/remove", methods=["POST"])
@project_page
def remove_suppression(project_id: str):
    channel, address = request.form.get("channel", ""), request.form.get("address", "")
    suppressions.remove(tidings().db, project_id, channel, address)
    flash(f"Removed {address} ({channel}).")
    return redirect(url_for("console.suppressions"))
