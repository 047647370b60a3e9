"""`tidings mcp` as an assistant sees it: the official MCP client, over stdio, on a real process."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime, timedelta

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from sqlalchemy import text

from tests.conftest import ADMIN_KEY, email


def server_for(settings) -> StdioServerParameters:
    env = {**{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}, **settings.environ}
    return StdioServerParameters(command=sys.executable, args=["-m", "app.runtime.cli", "mcp"], env=env)


def test_tools_list_and_a_digest_call_over_stdio(migrated, project, engine):
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    message_id = project.send(email(scheduled_at=later)).get_json()["id"]

    async def session() -> dict:
        async with Client(server_for(migrated), read_timeout_seconds=60) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            digest = await client.call_tool("digest", {"project": project.id})
            timeline = await client.call_tool("message_timeline", {"message_id": message_id})
            found = await client.call_tool("find_messages", {"project": project.id, "status": "scheduled"})
            refused = await client.call_tool("pause_provider", {"provider": "log", "admin_key": "guess-guess-guess"})
            paused = await client.call_tool("pause_provider", {"provider": "log", "admin_key": ADMIN_KEY})
            resumed = await client.call_tool("resume_provider", {"provider": "log", "admin_key": ADMIN_KEY})
            bad = await client.call_tool("digest", {"since": "last week"})
            return locals()

    seen = anyio.run(session)
    tools = seen["tools"]
    assert set(tools) == {
        "digest",
        "find_messages",
        "message_timeline",
        "list_providers",
        "pause_provider",
        "resume_provider",
        "requeue_dead_letters",
    }
    assert tools["digest"].annotations.read_only_hint is True
    assert "admin_key" in tools["requeue_dead_letters"].input_schema["required"]

    digest = seen["digest"]
    assert not digest.is_error
    assert digest.structured_content["counts"] == [
        {"project": project.id, "channel": "email", "status": "scheduled", "count": 1}
    ]
    assert seen["timeline"].structured_content["events"][0]["type"] == "scheduled"
    assert [m["id"] for m in seen["found"].structured_content["items"]] == [message_id]
    assert seen["refused"].is_error
    assert "admin key" in seen["refused"].content[0].text
    assert seen["paused"].structured_content["paused"] is True
    assert seen["resumed"].structured_content["paused"] is False
    assert seen["bad"].is_error and "since" in seen["bad"].content[0].text
    with engine.begin() as connection:
        connection.execute(text("UPDATE messages SET status = 'cancelled' WHERE id = :id"), {"id": message_id})
