"""The rollup the digest reads: trigger deltas plus folded counts always equal `messages`."""

from __future__ import annotations

from sqlalchemy import text

from app.observability.rollup import compact, fold
from tests.faults.stack import insert_accepted, new_project

ROLLUP = """
    SELECT hour, project_id, channel, status, sum(n)::bigint
    FROM (SELECT hour, project_id, channel, status, count AS n FROM message_counts
          UNION ALL SELECT hour, project_id, channel, status, delta FROM message_count_deltas) AS cells
    GROUP BY 1, 2, 3, 4 HAVING sum(n) <> 0
"""
DIRECT = """
    SELECT date_trunc('hour', created_at, 'UTC'), project_id, channel, status, count(*)
    FROM messages GROUP BY 1, 2, 3, 4
"""


def snapshot_agrees(engine, project: str) -> None:
    """Hour by hour, for one project's rows: other tests' old hours may be compacted into days
    already (snapshot_agrees_by_day checks those). Both sides are read in one snapshot."""
    mine = "SELECT * FROM ({}) AS t(hour, project_id, channel, status, n) WHERE project_id = :p"
    with engine.connect() as connection:
        connection.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        rollup = set(connection.execute(text(mine.format(ROLLUP)), {"p": project}).all())
        direct = set(connection.execute(text(mine.format(DIRECT)), {"p": project}).all())
    assert rollup == direct


def test_inserts_updates_and_deletes_are_counted_and_folded(engine):
    project = new_project(engine)
    ids = insert_accepted(engine, project, 50)
    snapshot_agrees(engine, project)
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE messages SET status = 'sent' WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids[:30]}
        )
        connection.execute(text("UPDATE messages SET updated_at = now() WHERE project_id = :p"), {"p": project})
        connection.execute(text("DELETE FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids[40:]})
    snapshot_agrees(engine, project)
    with engine.begin() as connection:
        while fold(connection, batch=7):
            pass
    snapshot_agrees(engine, project)
    with engine.connect() as connection:
        folded = dict(
            connection.execute(
                text("SELECT status, count FROM message_counts WHERE project_id = :p"), {"p": project}
            ).all()
        )
    assert folded == {"sent": 30, "accepted": 10}


def test_counters_that_reach_zero_are_removed(engine):
    project = new_project(engine)
    ids = insert_accepted(engine, project, 5)
    with engine.begin() as connection:
        fold(connection)
        connection.execute(text("DELETE FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": ids})
        fold(connection)
        left = connection.execute(text("SELECT count(*) FROM message_counts WHERE project_id = :p"), {"p": project})
        assert left.scalar() == 0


def test_old_hours_are_compacted_into_days_and_the_digest_stays_exact(engine, client):
    from datetime import UTC, datetime, timedelta

    from tests.conftest import ADMIN_KEY, bearer

    project = new_project(engine)
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO messages (project_id, channel, status, priority, created_at) "
                "SELECT :p, 'email', 'sent', 'bulk', now() - make_interval(hours => g * 7) "
                "FROM generate_series(0, 40) AS g"
            ),
            {"p": project},
        )
        while fold(connection):
            pass
        compact(connection)
        hours = connection.execute(
            text("SELECT hour FROM message_counts WHERE project_id = :p"), {"p": project}
        ).scalars()
        horizon = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)
        assert all(hour >= horizon or (hour.hour, hour.minute) == (0, 0) for hour in hours)
    snapshot_agrees_by_day(engine)
    since = datetime.now(UTC) - timedelta(days=5, hours=3)
    answer = client.get(
        "/v1/admin/digest", query_string={"project": project, "since": since.isoformat()}, headers=bearer(ADMIN_KEY)
    ).get_json()
    start = datetime.fromisoformat(answer["since"])
    assert start == since.replace(hour=0, minute=0, second=0, microsecond=0)
    with engine.connect() as connection:
        expected = connection.execute(
            text("SELECT count(*) FROM messages WHERE project_id = :p AND created_at >= :start"),
            {"p": project, "start": start},
        ).scalar_one()
    assert answer["counts"] == [{"project": project, "channel": "email", "status": "sent", "count": expected}]


def snapshot_agrees_by_day(engine) -> None:
    """Day cells hold what their hours held: totals per day agree with the table."""
    by_day = (
        "SELECT date_trunc('day', hour, 'UTC'), project_id, channel, status, sum(n) "
        "FROM ({}) AS t(hour, project_id, channel, status, n) GROUP BY 1, 2, 3, 4"
    )
    with engine.connect() as connection:
        connection.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        rollup = set(connection.execute(text(by_day.format(ROLLUP))).all())
        direct = set(connection.execute(text(by_day.format(DIRECT))).all())
    assert rollup == direct
