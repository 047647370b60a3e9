"""An API process reads large bodies while their sizes fit its budget; beyond it, 503 with Retry-After."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.api.body_budget import BodyBudget
from tests.api.test_email_extras import MIB, NOTHING, big_file, stored
from tests.api.test_errors import assert_error_shape
from tests.conftest import create_project, email


@pytest.fixture
def budget(app) -> Iterator[BodyBudget]:
    """The process's budget; what a test holds of it, as other requests' bodies would, it gives back."""
    budget = app.extensions["tidings"].bodies
    assert budget.held == 0
    yield budget
    budget.held = 0


def test_a_large_body_beyond_the_budget_is_503_with_retry_after_and_writes_nothing(client, engine, budget):
    project = create_project(client)
    others = budget.most - 2 * MIB
    assert budget.take(others)
    files = email(attachments=[big_file("scan.pdf", 2 * MIB)])  # 2.7 MiB of base64: more than the room left
    answer = project.send(files, key=project.test_key)
    assert assert_error_shape(answer, 503)["message"].startswith("This server is reading as many large bodies")
    assert answer.headers["Retry-After"] == "1"
    assert stored(engine, project.id) == NOTHING
    small = project.send(email(attachments=[big_file("note.pdf", MIB // 2)]), key=project.test_key)
    assert small.status_code == 202, small.get_json()  # a body of 1 MiB or less takes nothing from it
    budget.give(others)
    assert project.send(files, key=project.test_key).status_code == 202
    assert budget.held == 0  # the sends gave back what they took


def test_a_refused_large_body_gives_its_bytes_back(client, engine, budget):
    project = create_project(client)
    answer = project.send(email(attachments=[big_file("scan.exe", 2 * MIB)]), key=project.test_key)
    assert answer.status_code == 422
    assert budget.held == 0
