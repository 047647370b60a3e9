"""The workflow engine with several projects' runs in one call: a run whose data holds a time
out of bounds fails alone, with its reason, and the other project's run moves on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.db import session_scope
from app.workflows.engine import advance
from tests.api.test_workflows import save, setup
from tests.conftest import create_project
from tests.tasks.test_workflows import runs_for, state

STEPS = [{"delay": {"until": "{{ at }}", "offset": "1s"}}, {"send": {"channel": "sms", "template": "note-sms"}}]
# Past the last datetime with the offset, before the first, and two centuries away.
OUT_OF_BOUNDS = ("9999-12-31T23:59:59+00:00", "0001-01-01T00:00:00+00:00", "2200-01-01T00:00:00Z")


def test_a_time_out_of_bounds_fails_its_run_alone_and_another_projects_run_in_the_same_call_moves_on(
    client, project, engine, migrated
):
    setup(project, ["u1"])
    version = save(project, STEPS)["version"]
    poisoned = [runs_for(project, migrated, version, ["u1"], {"what": "x", "at": at})[0] for at in OUT_OF_BOUNDS]
    other = create_project(client)
    setup(other, ["u1"])
    due = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    [healthy] = runs_for(other, migrated, save(other, STEPS)["version"], ["u1"], {"what": "x", "at": due})
    with session_scope(migrated.database_url) as session:
        assert advance(session, [*poisoned, healthy], 0).runs == 4
    assert state(engine, poisoned) == [("failed", 0, False, 1)] * 3
    assert state(engine, [healthy]) == [("completed", 2, False, 2)]
    for run_id in poisoned:
        shown = project.call("GET", f"/v1/workflow-runs/{run_id}").get_json()
        assert shown["reason"] == "delay: data.at with its offset is more than a year from now"
    sent = other.call("GET", f"/v1/workflow-runs/{healthy}").get_json()["steps"]
    assert [(step["kind"], step["outcome"], step["message_id"] is not None) for step in sent] == [
        ("delay", "waited", False),
        ("send", "sent", True),
    ]
