"""The finalise statement: one set-based UPDATE records a whole batch's outcomes.

Each round finalises 500 rows claimed just before it (outside the timing), as deliver
does after a provider call; the commit that follows is outside the timing too.
"""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from typing import Any

from sqlalchemy.orm import Session

from app.config import use_settings
from app.delivery import store
from app.enums import MessageStatus
from tests.faults.stack import ready_messages

ROWS = 500
ROUNDS = 20
WORKER = "bench-host:1:finalise"  # the worker process that holds the claims it finalises


def test_finalise_500(benchmark, engine, migrated):
    use_settings(migrated)  # what the tests' app does: the commit announces the sent rows through its Redis
    with ExitStack() as sessions:  # closed here too: --benchmark-disable skips the teardown

        def claimed_batch() -> tuple[tuple[Session, list[store.Finalised]], dict[str, Any]]:
            ids = ready_messages(engine, ROWS)
            with Session(engine) as session, session.begin():
                claimed = store.claim(session, "fake", ids, WORKER, str(uuid.uuid4()))
            outcomes = [
                store.Finalised(row.id, MessageStatus.SENT, provider_message_id=f"fake-{uuid.uuid4().hex}")
                for row in claimed
            ]
            session = sessions.enter_context(Session(engine))
            session.begin()
            return (session, outcomes, WORKER), {}

        def commit(session: Session, outcomes: list[store.Finalised], worker: str) -> None:
            session.commit()
            session.close()

        benchmark.extra_info["items"] = ROWS
        sent = benchmark.pedantic(store.finalise, setup=claimed_batch, teardown=commit, rounds=ROUNDS, warmup_rounds=1)
    assert len(sent) == ROWS
