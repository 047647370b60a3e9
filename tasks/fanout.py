"""The fan-out of a send to a topic: its members' messages, a chunk per task.

Each task writes the next MEMBERS_PER_TASK members' messages in one transaction with the
batch's cursor (app/services/intake.py), then, after the commit, hands them to prepare and
links the task for the rest. So a topic of any size costs each process one chunk of
memory at a time, prepare starts on the first members while later ones are being written,
and a repeated task message writes nothing twice: it waits on the batch row, then starts
where the other left off. A lost one is taken up by the sweeper (tasks/maintenance.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import select, text

from app.changed_rows import changed_rows
from app.config import Settings, current_settings
from app.db import enqueue_after_commit, session_scope
from app.delivery import dispatch
from app.delivery.broker import celery_app
from app.enums import MessageStatus
from app.models import Batch
from app.services import intake
from tasks import isolation

# About a third of a second of PostgreSQL's time per chunk, and 10 prepare tasks.
MEMBERS_PER_TASK = 5000


@celery_app.task(name="tidings.fan_out")
def fan_out(batch_id: str) -> int:
    """Write the next chunk of a topic send's messages; how many it wrote. Through the door
    (tasks/isolation.py): a fan-out that cannot go on ends, rather than fail at every sweep."""
    config = current_settings()
    written = 0

    def write(_: Sequence[str]) -> None:
        nonlocal written
        with session_scope(config.database_url) as session:
            batch = session.scalar(
                select(Batch).where(Batch.id == batch_id, Batch.fanout_done_at.is_(None)).with_for_update()
            )
            if batch is None:  # done already: this was a repeated message
                return
            ids = intake.write_topic_chunk(session, batch, MEMBERS_PER_TASK)
            assert batch.fanout is not None  # write_topic_chunk wrote a topic send's chunk
            if ids and "demoted_limit" in batch.fanout:
                intake.record_demotions(
                    session, batch.project_id, ids, intake.Earned(0, len(ids), batch.fanout["demoted_limit"])
                )
            if ids and batch.fanout["status"] == MessageStatus.ACCEPTED:
                for signature in dispatch.prepare(ids, batch.priority, project=batch.project_id):
                    enqueue_after_commit(session, signature)
            if len(ids) == MEMBERS_PER_TASK:
                enqueue_after_commit(session, dispatch.fan_out(batch_id, batch.priority))
        written = len(ids)

    with isolation.batch("fan_out", [batch_id], config=config, fail_alone=stop_fan_out(config, "batches")) as run:
        run.in_halves(write)
    return written


def stop_fan_out(config: Settings, table: str) -> Callable[[str, str], bool]:
    """End the fan-out of one row of `table` (batches, workflow_triggers) that its task cannot
    carry on: what it wrote stands, the sweeper stops taking it up, the reason is logged."""

    def stop(row_id: str, _: str) -> bool:
        with session_scope(config.database_url) as session:
            ended = changed_rows(
                session,
                text(f"UPDATE {table} SET fanout_done_at = now() WHERE id = :id AND fanout_done_at IS NULL"),
                {"id": row_id},
            )
            return bool(ended)

    return stop
