"""The workflow step task without a worker: a repeated task moves nothing twice, a long wait is
parked for beat, the sweeper takes up runs whose task was lost, a cancel before the first
step stops it, and a sliding digest window moves with each arrival."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from app.db import session_scope
from app.models import WorkflowTrigger
from app.redis_client import redis_for
from app.remembered import forget_all
from app.workflows import service
from tasks.workflows import redispatch_stalled, release_parked, workflow_step
from tests.api.test_workflows import save, setup
from tests.waiting import wait_until


def start(project, migrated, steps) -> list[str]:
    """Runs for u1 and u2, written as a trigger writes them but with no task sent for them:
    here the test is the only one to move them, whatever worker the session runs."""
    setup(project, ["u1", "u2"])
    version = save(project, steps)["version"]
    return runs_for(project, migrated, version, ["u1", "u2"], {"what": "x"})


def runs_for(project, migrated, version: int, subscribers: list[str], data: dict) -> list[str]:
    """One more trigger's runs for `subscribers`, no task sent for them; their ids, in order."""
    trigger_id = uuid.uuid4()
    with session_scope(migrated.database_url) as session:
        session.add(
            WorkflowTrigger(
                id=trigger_id,
                project_id=project.id,
                workflow_key="alerts",
                workflow_version=version,
                test=False,
                data=data,
            )
        )
        session.flush()
        return sorted(service.write_runs(session, str(trigger_id), subscribers))


def state(engine, run_ids: list[str]) -> list[tuple]:
    with engine.connect() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                text(
                    """
                    SELECT r.status, r.step, r.parked, (SELECT count(*) FROM workflow_run_steps s WHERE s.run_id = r.id)
                    FROM workflow_runs r WHERE r.id = ANY(CAST(:ids AS uuid[])) ORDER BY r.id
                    """
                ),
                {"ids": run_ids},
            )
        ]


def test_a_repeated_step_task_writes_one_message_per_run(project, engine, migrated):
    runs = start(project, migrated, [{"send": {"channel": "sms", "template": "note-sms"}}])
    assert workflow_step(runs, 0) == 2
    assert workflow_step(runs, 0) == 0
    assert state(engine, runs) == [("completed", 1, False, 1)] * 2
    with engine.connect() as connection:
        messages = connection.execute(
            text(
                "SELECT count(*) FROM messages WHERE id IN (SELECT message_id FROM workflow_run_steps "
                "WHERE run_id = ANY(CAST(:ids AS uuid[])))"
            ),
            {"ids": runs},
        ).scalar()
    assert messages == 2


def test_a_long_delay_is_parked_and_released_by_beat_when_due(project, engine, migrated):
    runs = start(project, migrated, [{"delay": {"for": "1h"}}, {"send": {"channel": "sms", "template": "note-sms"}}])
    assert workflow_step(runs, 0) == 2
    assert state(engine, runs) == [("running", 1, True, 1)] * 2
    assert workflow_step(runs, 1) == 0  # not due: nothing moves
    with session_scope(migrated.database_url) as session:
        assert release_parked(session) == 0
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE workflow_runs SET due_at = now() - interval '1 second' WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": runs},
        )
    with session_scope(migrated.database_url) as session:
        assert release_parked(session) >= 2
    # The released runs' task, or this call if the session runs no worker: either moves them once.
    workflow_step(runs, 1)
    wait_until(lambda: state(engine, runs), lambda now: now == [("completed", 2, False, 2)] * 2, 20, "both runs done")


def test_the_sweeper_takes_up_runs_whose_task_was_lost(project, engine, migrated):
    runs = start(project, migrated, [{"send": {"channel": "sms", "template": "note-sms"}}])
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE workflow_runs SET updated_at = now() - interval '1 hour' WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": runs},
        )
    with session_scope(migrated.database_url) as session:
        assert redispatch_stalled(session, 60) >= 2
    with engine.connect() as connection:
        touched = connection.execute(
            text(
                "SELECT count(*) FROM workflow_runs WHERE id = ANY(CAST(:ids AS uuid[])) "
                "AND updated_at > now() - interval '1 minute'"
            ),
            {"ids": runs},
        ).scalar()
    assert touched == 2


def test_a_send_step_whose_template_is_gone_fails_its_runs_and_writes_no_message(project, engine, migrated):
    """Templates cannot be deleted through the API; rows removed underneath (and every process
    told, as a deletion must) fail the step's runs with the reason instead of its task."""
    runs = start(project, migrated, [{"send": {"channel": "sms", "template": "note-sms"}}])
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM templates WHERE project_id = :p"), {"p": project.id})
    forget_all(redis_for(migrated.redis_url))
    workflow_step(runs, 0)
    assert state(engine, runs) == [("failed", 0, False, 1)] * 2
    for run_id in runs:
        [step] = project.call("GET", f"/v1/workflow-runs/{run_id}").get_json()["steps"]
        assert (step["outcome"], step["message_id"]) == ("failed", None)
        assert "template 'note-sms' for sms is gone" in str(step)


def test_a_run_cancelled_before_its_first_step_sends_nothing(project, engine, migrated):
    runs = start(project, migrated, [{"send": {"channel": "sms", "template": "note-sms"}}])
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE workflow_runs SET trigger_key = 'k' WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": runs}
        )
    assert project.call("POST", "/v1/workflows/alerts/cancel", {"trigger_key": "k"}).get_json() == {"cancelled": 2}
    assert workflow_step(runs, 0) == 0
    assert state(engine, runs) == [("cancelled", 0, False, 0)] * 2
    events = project.call("GET", "/v1/events?type=workflow.cancelled").get_json()["items"]
    assert sorted(event["data"]["run_id"] for event in events) == runs


def test_a_sliding_digest_window_moves_with_each_arrival_and_its_leader_waits_for_it(project, engine, migrated):
    setup(project, ["u1"])
    steps = [
        {"digest": {"window": "1m", "sliding": True, "max": "5m"}},
        {"send": {"channel": "in_app", "template": "note"}},
    ]
    version = save(project, steps)["version"]
    [leader] = runs_for(project, migrated, version, ["u1"], {"what": "first"})
    assert workflow_step([leader], 0) == 1
    opened = digest_times(engine, project.id)
    [follower] = runs_for(project, migrated, version, ["u1"], {"what": "second"})
    assert workflow_step([follower], 0) == 1
    moved = digest_times(engine, project.id)
    assert opened["closes_at"] < moved["closes_at"] <= moved["latest_close_at"] == opened["latest_close_at"]
    assert state(engine, [follower]) == [("digested", 0, False, 1)]
    with engine.begin() as connection:  # the leader's first wake-up, at the window's first end
        connection.execute(text("UPDATE workflow_runs SET due_at = now() WHERE id = :r"), {"r": leader})
    assert workflow_step([leader], 0) == 1
    with engine.connect() as connection:
        waits_until = connection.execute(text("SELECT due_at FROM workflow_runs WHERE id = :r"), {"r": leader}).scalar()
    assert waits_until == moved["closes_at"] and state(engine, [leader]) == [("running", 0, False, 0)]
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE workflow_digests SET closes_at = now() WHERE project_id = :p"), {"p": project.id}
        )
        connection.execute(text("UPDATE workflow_runs SET due_at = now() WHERE id = :r"), {"r": leader})
    assert workflow_step([leader], 0) == 1
    with engine.connect() as connection:
        data = connection.execute(text("SELECT data FROM workflow_runs WHERE id = :r"), {"r": leader}).scalar()
    assert (data["count"], [item["what"] for item in data["items"]]) == (2, ["first", "second"])
    assert state(engine, [leader]) == [("completed", 2, False, 2)]


def test_a_run_that_arrives_after_its_digest_flushed_leads_the_next_one(project, engine, migrated):
    """Never both, never neither: a run whose task comes after the flush is not in it and waits,
    parked, for the window it opened (why tests/api's digest test closes only after every join)."""
    setup(project, ["u1"])
    steps = [{"digest": {"window": "1h"}}, {"send": {"channel": "in_app", "template": "digest"}}]
    version = save(project, steps)["version"]
    [leader] = runs_for(project, migrated, version, ["u1"], {"what": "first"})
    [late] = runs_for(project, migrated, version, ["u1"], {"what": "second"})  # its task still queued
    assert workflow_step([leader], 0) == 1
    with engine.begin() as connection:  # the window closes before the second run's task runs
        connection.execute(
            text("UPDATE workflow_digests SET closes_at = now() WHERE project_id = :p"), {"p": project.id}
        )
        connection.execute(text("UPDATE workflow_runs SET due_at = now() WHERE id = :r"), {"r": leader})
    assert workflow_step([leader], 0) == 1
    assert workflow_step([late], 0) == 1
    assert state(engine, [leader]) == [("completed", 2, False, 2)]
    assert state(engine, [late]) == [("running", 0, True, 0)]
    with engine.connect() as connection:
        data = connection.execute(text("SELECT data FROM workflow_runs WHERE id = :r"), {"r": leader}).scalar()
        digests = connection.execute(
            text(
                "SELECT leader_id::text, flushed_at IS NOT NULL, closes_at > now() + interval '59 minutes' "
                "FROM workflow_digests WHERE project_id = :p ORDER BY flushed_at NULLS LAST"
            ),
            {"p": project.id},
        ).all()
    assert (data["count"], [item["what"] for item in data["items"]]) == (1, ["first"])
    assert [tuple(row) for row in digests] == [(leader, True, False), (late, False, True)]


def digest_times(engine, project_id: str) -> dict:
    with engine.connect() as connection:
        row = connection.execute(
            text("SELECT closes_at, latest_close_at FROM workflow_digests WHERE project_id = :p"), {"p": project_id}
        ).one()
    return dict(row._mapping)


def test_erasing_a_subscriber_erases_its_runs_and_their_steps(project, engine, migrated):
    runs = start(project, migrated, [{"send": {"channel": "in_app", "template": "note"}}, {"delay": {"for": "1d"}}])
    assert workflow_step(runs, 0) == 2
    assert project.call("DELETE", "/v1/subscribers/u1").status_code == 204
    with engine.connect() as connection:
        left = connection.execute(
            text(
                "SELECT r.subscriber_id, count(s.run_id) FROM workflow_runs r "
                "LEFT JOIN workflow_run_steps s ON s.run_id = r.id WHERE r.project_id = :p GROUP BY 1"
            ),
            {"p": project.id},
        ).all()
    assert [tuple(row) for row in left] == [("u2", 2)]
