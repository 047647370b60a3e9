"""Admin routes: projects, their keys and own provider accounts, operations. They take the
admin key, never a project key."""

from __future__ import annotations

from typing import Any

from app.access.auth import require_admin_key
from app.api.blueprint import Blueprint
from app.api.context import context
from app.api.contract import ADMIN_KEY, OPERATIONS, PROJECTS, Access
from app.schemas.core import (
    DigestQuerySchema,
    DigestSchema,
    KeyCreateSchema,
    KeySchema,
    PauseSchema,
    ProjectCreatedSchema,
    ProjectCreateSchema,
    ProjectSchema,
    ProjectUpdateSchema,
    ProviderAccountInputSchema,
    ProviderAccountSchema,
    ProviderStateSchema,
    RequeuedSchema,
    RequeueSchema,
    SigningSecretSchema,
)
from app.services import digest, operations, projects, provider_accounts


def authenticate() -> None:
    ctx = context()
    require_admin_key(ctx.db, ctx.settings.admin_key)


blp = Blueprint(
    "admin",
    __name__,
    access=Access((ADMIN_KEY,), authenticate, errors=(403,)),
    tag=PROJECTS,
    url_prefix="/v1/admin",
    description="Projects, API keys and operations (admin key).",
)


@blp.route("/projects", methods=["POST"])
@blp.arguments(ProjectCreateSchema)
@blp.response(201, ProjectCreatedSchema)
def create_project(data: dict[str, Any]):
    """Create a project.

    A project, with the secret its webhook-channel messages are signed with (in this answer only).
    """
    return projects.create_project(context().db, data)


@blp.route("/projects", methods=["GET"])
@blp.response(200, ProjectSchema(many=True))
def list_projects():
    """List projects.

    Every project of the deployment, with its channels, rate limit and settings.
    """
    return projects.list_projects(context().db)


@blp.route("/projects/<project_id>", methods=["GET"])
@blp.response(200, ProjectSchema)
def get_project(project_id: str):
    """Get a project.

    One project, with its channels, rate limit and settings.
    """
    return projects.get_project(context().db, project_id)


@blp.route("/projects/<project_id>", methods=["PATCH"])
@blp.arguments(ProjectUpdateSchema)
@blp.response(200, ProjectSchema)
def update_project(data: dict[str, Any], project_id: str):
    """Update a project.

    Change the name, channels, rate limit or settings; `settings` is replaced whole, so send the project's other
    settings along. Channels and limits apply at once.
    """
    return projects.update_project(context().db, context().redis, project_id, data)


@blp.route("/projects/<project_id>", methods=["DELETE"])
@blp.response(204)
def delete_project(project_id: str):
    """Delete a project.

    The project with everything it owns: keys, subscribers, messages, events. Its keys stop working at once.
    """
    projects.delete_project(context().db, context().redis, project_id)


@blp.route("/projects/<project_id>/webhook-signing-secret/rotate", methods=["POST"])
@blp.response(200, SigningSecretSchema)
def rotate_signing_secret(project_id: str):
    """Rotate a project's webhook signing secret.

    A new webhook signing secret (in this answer only); the old one keeps signing beside it for 24 hours.
    """
    return projects.rotate_signing_secret(context().db, project_id)


@blp.route("/projects/<project_id>/keys", methods=["POST"])
@blp.arguments(KeyCreateSchema)
@blp.response(201, KeySchema)
def create_key(data: dict[str, Any], project_id: str):
    """Create an API key.

    A live key sends for real; a test key walks the pipeline without reaching a provider. The key is in this
    answer only: Tidings stores its SHA-256.
    """
    return projects.create_key(context().db, project_id, data["name"], data["kind"])


@blp.route("/projects/<project_id>/keys/<key_id>", methods=["DELETE"])
@blp.response(204)
def revoke_key(project_id: str, key_id: str):
    """Revoke an API key.

    The key stops working at once, on every API process; its messages are kept.
    """
    projects.revoke_key(context().db, context().redis, project_id, key_id)


@blp.route("/projects/<project_id>/providers", methods=["GET"])
@blp.response(200, ProviderAccountSchema(many=True))
def list_provider_accounts(project_id: str):
    """List a project's own provider accounts.

    The provider accounts this project brought itself (which settings are set, never their values).
    """
    ctx = context()
    return provider_accounts.list_all(ctx.db, ctx.settings, ctx.redis, project_id)


@blp.route("/projects/<project_id>/providers/<name>", methods=["GET"])
@blp.response(200, ProviderAccountSchema)
def get_provider_account(project_id: str, name: str):
    """Get a project's own provider account.

    Which settings are set (never their values), and whether the account is paused.
    """
    ctx = context()
    return provider_accounts.get(ctx.db, ctx.settings, ctx.redis, project_id, name)


@blp.route("/projects/<project_id>/providers/<name>", methods=["PUT"])
@blp.arguments(ProviderAccountInputSchema)
@blp.response(200, ProviderAccountSchema, description="Replaced.")
@blp.alt_response(201, schema=ProviderAccountSchema, description="Created.")
def put_provider_account(data: dict[str, Any], project_id: str, name: str):
    """Set a project's own provider account.

    Send this project's messages through its own account with a provider of this deployment; the settings are
    sealed with TIDINGS_SECRET_KEY.
    """
    ctx = context()
    account, created = provider_accounts.put(ctx.db, ctx.settings, ctx.redis, project_id, name, data["settings"])
    return account, 201 if created else 200


@blp.route("/projects/<project_id>/providers/<name>", methods=["DELETE"])
@blp.response(204)
def delete_provider_account(project_id: str, name: str):
    """Remove a project's own provider account.

    Back to the deployment's account with that provider.
    """
    ctx = context()
    provider_accounts.delete(ctx.db, ctx.redis, project_id, name)


@blp.route("/messages/requeue", methods=["POST"], tags=[OPERATIONS])
@blp.arguments(RequeueSchema)
@blp.response(200, RequeuedSchema)
def requeue(criteria: dict[str, Any]):
    """Requeue dead letters, or messages whose fate is unknown.

    Send dead letters again with fresh attempts (up to 10,000 a call), chosen by ids or by project, channel,
    provider and time; with `"status": "unknown"`, messages whose fate is unknown, which may reach their
    recipients twice (the answer and each message's event say so).
    """
    return operations.requeue_answer(context().db, criteria)


@blp.route("/providers", methods=["GET"], tags=[OPERATIONS])
@blp.response(200, ProviderStateSchema(many=True))
def providers():
    """List providers.

    The providers this deployment routes to: failover order, pace, pause and circuit breaker.
    """
    ctx = context()
    return operations.provider_states(ctx.settings, ctx.redis)


@blp.route("/providers/<name>/pause", methods=["POST"], tags=[OPERATIONS])
@blp.arguments(PauseSchema)
@blp.response(200, ProviderStateSchema)
def pause_provider(pause: dict[str, Any], name: str):
    """Pause a provider.

    Stop sending through a provider, for `seconds` or until resumed; messages wait, attempts are kept.
    """
    ctx = context()
    return operations.set_pause(ctx.settings, ctx.redis, name, pause)


@blp.route("/providers/<name>/resume", methods=["POST"], tags=[OPERATIONS])
@blp.response(200, ProviderStateSchema)
def resume_provider(name: str):
    """Resume a provider.

    Send through a paused provider again, and close its circuit breaker.
    """
    ctx = context()
    return operations.set_pause(ctx.settings, ctx.redis, name, None)


@blp.route("/digest", methods=["GET"], tags=[OPERATIONS])
@blp.arguments(DigestQuerySchema, location="query")
@blp.response(200, DigestSchema)
def get_digest(query: dict[str, Any]):
    """The digest.

    Counts by project, channel and status, throughput, queues, backlog, providers and dead letters.
    """
    ctx = context()
    return digest.digest(ctx.db, ctx.settings, ctx.redis, query.get("since"), query.get("project"))
