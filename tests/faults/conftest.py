"""Fault tests: a stack of real processes per test, and the provider's ledger as the truth."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from tests.faults.stack import Stack, new_project
from tests.provider_server import FakeProviderServer


@pytest.fixture
def provider() -> Iterator[FakeProviderServer]:
    """A provider of the test's own, with 100 ms per call, that honours our message id."""
    server = FakeProviderServer(latency=0.1, deduplicate=True).start()
    yield server
    server.stop()


@pytest.fixture
def make_stack(tmp_path, server_urls, migrated, provider) -> Iterator:
    stacks: list[Stack] = []

    def make(**overrides: str) -> Stack:
        stack = Stack(tmp_path / f"stack{len(stacks)}", server_urls[0], provider.url, **overrides)
        stacks.append(stack)
        return stack

    (tmp_path / "stack0").mkdir()
    for index in range(1, 4):
        (tmp_path / f"stack{index}").mkdir()
    yield make
    for stack in stacks:
        stack.stop()


@pytest.fixture
def fault_project(engine: Engine) -> str:
    return new_project(engine)
