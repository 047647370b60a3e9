"""What the provider's pace puts off in a bulk lane is due when the pace has room, not when its token wakes."""

from __future__ import annotations

import redis
from sqlalchemy import text

from app.delivery import fairness, pacing
from app.delivery.pacing import SLICES, WINDOW_MS
from app.delivery.queues import deliver_queue
from tasks.deliver import deliver_next
from tests.delivery.test_fairness import paced
from tests.faults.stack import new_project, ready_messages


def test_rows_the_pace_puts_off_are_due_when_it_has_room_however_long_their_token_sleeps(
    engine, settings, backup_provider
):
    """A lane that counts many chunks spreads its tokens' wake-ups over a long time (here up
    to 250 s); the rows of a chunk put off must not carry that as their deadline: should the
    worker that takes them next die, the sweeper would leave them that long (55 rows once
    waited 53 s after a host was cut off)."""
    client = redis.Redis.from_url(settings.redis_url)
    client.delete(*pacing.keys("fake2"))
    lane = deliver_queue("fake2", "bulk")
    project = new_project(engine)
    ids = ready_messages(engine, 10, project)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE messages SET provider = 'fake2' WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
        )
    fairness.deposit(client, lane, [(project, ids)])
    client.set(fairness.count(lane), 1000)  # a lane that counts 1,000 chunks waiting
    try:
        with paced(settings, "fake2", 5 * SLICES):  # room for 5 of the 10 in a slice
            deliver_next("fake2", "bulk")
    finally:  # the chunk given back and the window are this test's: no later test may take them
        client.delete(fairness.count(lane), fairness.ring(lane), fairness.lists(lane) + project, *pacing.keys("fake2"))
    with engine.connect() as connection:
        put_off = (
            connection.execute(
                text(
                    "SELECT extract(epoch FROM next_attempt_at - now()) FROM messages "
                    "WHERE id = ANY(CAST(:ids AS uuid[])) AND status = 'ready'"
                ),
                {"ids": ids},
            )
            .scalars()
            .all()
        )
    assert len(put_off) == 5  # granted room for 5: the other 5 wait their turn, due at once or when it has room
    assert [wait for wait in put_off if wait is not None and wait > WINDOW_MS / 1000] == []
