"""A client generated from the served `/openapi.json` walks the README's tour, unedited.

openapi-python-client (a dev dependency) writes the client once per module into a temporary
folder; the test imports it as generated and, over real HTTP: creates a project and a key with
the admin key, sends with an Idempotency-Key and replays it, reads the timeline, lists with a
filter, and reads the field errors of a 422. Every call goes through the generated functions,
their models and their authentication, which is what a team using the spec would get.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import requests

from tests.conftest import ADMIN_KEY

PACKAGE = "tidings_client"
# The open pixel's GIF and SES's text/plain status webhooks have no type of their own in the
# generator: bytes will do. Any other warning fails the test.
CONFIG = {"content_type_overrides": {"image/gif": "application/octet-stream", "text/plain": "application/octet-stream"}}


@pytest.fixture(scope="module")
def generated(live_api: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    folder = tmp_path_factory.mktemp("generated")
    (folder / "spec.json").write_text(requests.get(f"{live_api}/openapi.json", timeout=10).text)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    bin_dir = Path(sys.executable).parent  # the generator formats its output with our ruff
    command = [
        str(bin_dir / "openapi-python-client"),
        "generate",
        "--path",
        str(folder / "spec.json"),
        "--output-path",
        str(folder / PACKAGE),
        "--meta",
        "none",
        "--config",
        str(folder / "config.json"),
        "--fail-on-warning",
    ]
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(folder))
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def module(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_the_readme_tour_with_a_generated_client(generated, live_api):
    models = module("models")
    create_project = module("api.projects_and_keys.create_project")
    create_key = module("api.projects_and_keys.create_key")
    send = module("api.messages.send")
    get_message = module("api.messages.get_message")
    list_messages = module("api.messages.list_messages")
    admin = generated.AuthenticatedClient(base_url=live_api, token=ADMIN_KEY, raise_on_unexpected_status=True)

    # 1. a project, 2. a key for it (admin key)
    project_id = f"t-{uuid.uuid4().hex[:12]}"
    body = models.ProjectCreate(
        id=project_id, name="Acme", channels=[models.ProjectCreateChannelsItem.EMAIL], rate_limit_per_min=6000
    )
    created = create_project.sync_detailed(client=admin, body=body)
    assert created.status_code == 201 and isinstance(created.parsed, models.ProjectCreated)
    assert created.parsed.webhook_signing_secret.startswith("whsec_")
    key = create_key.sync(
        project_id, client=admin, body=models.KeyCreate(name="backend", kind=models.KeyCreateKind.LIVE)
    )
    assert isinstance(key, models.Key) and key.key.startswith("tid_live_")
    project = generated.AuthenticatedClient(base_url=live_api, token=key.key, raise_on_unexpected_status=True)

    # 3. send with an Idempotency-Key, then the same request again: the same answer, marked replayed
    message = models.Send(
        channel=models.SendChannel.EMAIL,
        to=models.Recipient(email="ada@example.com"),
        content=models.Content(subject="Your order", text="It is on its way."),
    )
    first = send.sync_detailed(client=project, body=message, idempotency_key="order-17-confirmation")
    assert first.status_code == 202 and isinstance(first.parsed, models.Accepted)
    assert first.headers["RateLimit-Limit"] == "6000"
    again = send.sync_detailed(client=project, body=message, idempotency_key="order-17-confirmation")
    assert again.status_code == 202 and again.parsed.id == first.parsed.id
    assert again.headers["Idempotent-Replayed"] == "true"

    # 4. follow it: its status and timeline
    found = get_message.sync(first.parsed.id, client=project)
    assert isinstance(found, models.Message) and found.id == first.parsed.id
    assert found.events[0].type_ == "accepted"

    # the log of the project's messages, filtered by channel: the one sent, once
    page = list_messages.sync(client=project, channel=models.ListMessagesChannel.EMAIL)
    assert isinstance(page, models.MessagePage)
    assert [item.id for item in page.items] == [first.parsed.id]

    # a bad address: a 422 whose field errors name it
    bad = models.Send(
        channel=models.SendChannel.EMAIL,
        to=models.Recipient(email="not-an-address"),
        content=models.Content(subject="Your order", text="It is on its way."),
    )
    refused = send.sync_detailed(client=project, body=bad)
    assert refused.status_code == 422 and isinstance(refused.parsed, models.Error)
    assert refused.parsed.code == 422
    errors = refused.parsed.errors.to_dict()
    assert list(errors["json"]["to"]) == ["email"], errors
