"""`tidings mcp`: the operator's view of Tidings as MCP tools, for an AI assistant, over stdio.

Read tools (digest, find messages, a message's timeline, providers) need nothing but the
process's own settings. The tools that change something (pause, resume, requeue) also
take the admin key as an argument and refuse without it: the assistant can look around
freely, but acting needs the key from the person it works for.

Every tool calls the same service function as the HTTP API and validates its input with
the same schema, so the answers have the API's shape and the API's rules.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from marshmallow import ValidationError
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from werkzeug.exceptions import HTTPException

from app.runtime.cli_ops import Ops, load
from app.schemas.core import (
    DigestQuerySchema,
    DigestSchema,
    MessagePageSchema,
    MessageQuerySchema,
    MessageSchema,
    PauseSchema,
    ProviderStateSchema,
    RequeueSchema,
)
from app.services import digest, messages, operations

INSTRUCTIONS = """Tidings delivers notifications (email, SMS, push, webhooks) through PostgreSQL and Celery.
Start with `digest` for the whole picture; `find_messages` and `message_timeline` explain one message.
pause_provider, resume_provider and requeue_dead_letters change the system and need the admin key."""

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
CHANGE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

Tool = TypeVar("Tool", bound=Callable[..., Any])


def service_errors(tool: Tool) -> Tool:
    """The API's 4xx answers and validation errors become tool errors the model can read."""

    @wraps(tool)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return tool(*args, **kwargs)
        except ValidationError as error:
            raise ToolError(f"Invalid input: {error.messages}") from None
        except HTTPException as error:
            data = getattr(error, "data", None) or {}
            raise ToolError(data.get("message") or error.description or str(error)) from None

    return wrapper  # type: ignore[return-value]


def build(ops: Ops) -> MCPServer:
    server = MCPServer("tidings", instructions=INSTRUCTIONS)

    def require_admin(admin_key: str) -> None:
        if not hmac.compare_digest(admin_key.encode(), ops.settings.admin_key.encode()):
            raise ToolError("This tool changes the system and needs the admin key (TIDINGS_ADMIN_KEY).")

    @server.tool(name="digest", annotations=READ)
    @service_errors
    def get_digest(since: str | None = None, project: str | None = None) -> dict[str, Any]:
        """Counts by project, channel and status of messages created since `since` (RFC 3339, cut to
        the hour; default 24 hours ago), throughput, queue depths, the oldest waiting message per
        lane, paused providers, circuit breakers and dead letters."""
        query = load(DigestQuerySchema(), {"since": since, "project": project})
        answer = digest.digest(ops.db, ops.settings, ops.redis, query.get("since"), query.get("project"))
        return DigestSchema().dump(answer)

    @server.tool(annotations=READ)
    @service_errors
    def find_messages(
        project: str,
        status: str | None = None,
        channel: str | None = None,
        subscriber_id: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """A project's messages, newest first, filtered; `status="dead"` lists its dead letters.
        Pass `next_cursor` back as `cursor` for the next page."""
        filters = load(
            MessageQuerySchema(),
            {
                "status": status,
                "channel": channel,
                "subscriber_id": subscriber_id,
                "since": since,
                "until": until,
                "limit": limit,
                "cursor": cursor,
            },
        )
        return MessagePageSchema().dump(messages.list_messages(ops.db, project, filters))

    @server.tool(annotations=READ)
    @service_errors
    def message_timeline(message_id: str) -> dict[str, Any]:
        """One message with every status it passed through and why (failures, retries, pauses)."""
        project = operations.project_of_message(ops.db, message_id)
        return MessageSchema().dump(messages.get_message(ops.db, project, message_id))

    @server.tool(annotations=READ)
    @service_errors
    def list_providers() -> list[dict[str, Any]]:
        """The providers this deployment sends through: channels, pace, pause and breaker state."""
        return ProviderStateSchema(many=True).dump(operations.provider_states(ops.settings, ops.redis))

    @server.tool(annotations=CHANGE)
    @service_errors
    def pause_provider(
        provider: str, admin_key: str, seconds: int | None = None, reason: str = "paused from the MCP tools"
    ) -> dict[str, Any]:
        """Stop sending through a provider for `seconds` (default: until resumed). Messages wait
        and keep their attempts. Needs the admin key."""
        require_admin(admin_key)
        pause = load(PauseSchema(), {"seconds": seconds, "reason": reason})
        return ProviderStateSchema().dump(operations.set_pause(ops.settings, ops.redis, provider, pause))

    @server.tool(annotations=CHANGE)
    @service_errors
    def resume_provider(provider: str, admin_key: str) -> dict[str, Any]:
        """Send through a paused provider again. Needs the admin key."""
        require_admin(admin_key)
        return ProviderStateSchema().dump(operations.set_pause(ops.settings, ops.redis, provider, None))

    @server.tool(annotations=CHANGE)
    @service_errors
    def requeue_dead_letters(
        admin_key: str,
        ids: list[str] | None = None,
        project: str | None = None,
        channel: str | None = None,
        provider: str | None = None,
        since: str | None = None,
        until: str | None = None,
    ) -> dict[str, int]:
        """Send dead letters again with fresh attempts: by ids, or by any mix of the filters (up to
        10,000 a call). Needs the admin key."""
        require_admin(admin_key)
        criteria = load(
            RequeueSchema(),
            {
                "ids": ids,
                "project": project,
                "channel": channel,
                "provider": provider,
                "since": since,
                "until": until,
                "requested_by": "mcp",
            },
        )
        return {"requeued": operations.requeue(ops.db, criteria)}

    return server
