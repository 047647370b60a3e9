"""Fault tests: a stack of real processes and a database per test, and the provider's ledger as the truth."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from tests.databases import database, engine
from tests.faults.stack import Stack, fault_pool, new_project
from tests.provider_server import FakeProviderServer

__all__ = ["database", "engine"]  # a database of each test's own (tests/databases.py)


@pytest.fixture
def provider() -> Iterator[FakeProviderServer]:
    """A provider of the test's own, with 100 ms per call, that takes no idempotency key: every
    repeat is a second delivery, so the ledger forgives nothing. A test that plays a
    provider which de-duplicates sets `provider.deduplicate = True` before making its stack."""
    server = FakeProviderServer(latency=0.1, deduplicate=False).start()
    yield server
    server.stop()


@pytest.fixture
def pool() -> str:
    """The workers' pool (`fault_pool`); a module that runs its tests under both whatever the
    run says has `pytest.mark.parametrize("pool", POOLS)`."""
    return fault_pool()


@pytest.fixture
def make_stack(tmp_path, database, provider, pool) -> Iterator:
    stacks: list[Stack] = []

    def make(**overrides: str) -> Stack:
        """A stack whose workers know what the provider is: resending an abandoned claim is
        safe only where it de-duplicates (`overrides` may say otherwise, on purpose)."""
        idempotent = {"FAKE_PROVIDER_IDEMPOTENT": str(provider.deduplicate).lower()}
        directory = tmp_path / f"stack{len(stacks)}"
        stack = Stack(directory, database, provider.url, pool, **{**idempotent, **overrides})
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
