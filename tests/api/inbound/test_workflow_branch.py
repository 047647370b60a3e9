"""A workflow branch on `delivered`, told by the provider's own status webhook (Twilio's),
through the same receiver every status webhook takes."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from tasks.workflows import workflow_step
from tests.api.inbound.test_twilio import PHONE, callback, post
from tests.tasks.test_workflows import start, state


def test_a_branch_goes_on_only_for_the_run_whose_message_twilio_reported_delivered(inbound, project, engine, migrated):
    steps = [
        {"send": {"channel": "sms", "template": "note-sms"}},
        {"delay": {"for": "1h"}},
        {"branch": {"if": {"was": "delivered"}}},
        {"send": {"channel": "in_app", "template": "note"}},
    ]
    runs = start(project, migrated, steps)
    assert workflow_step(runs, 0) == 2
    sids = {run: "SM" + uuid.uuid4().hex for run in runs}
    with engine.begin() as connection:
        for run, sid in sids.items():
            # As the provider took it: Twilio names the message by its id and the number it went to.
            connection.execute(
                text(
                    """
                    UPDATE messages SET status = 'sent', provider = 'twilio', provider_message_id = :sid,
                                        to_address = :phone, sent_at = now(), attempts = 1
                    WHERE id = (SELECT message_id FROM workflow_run_steps WHERE run_id = :run AND step = 0)
                    """
                ),
                {"sid": sid, "run": run, "phone": PHONE},
            )
    delivered, silent = runs
    answer = post(inbound, callback(sids[delivered], "delivered")).get_json()
    assert answer["applied"] == 1, answer
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE workflow_runs SET due_at = now() - interval '1 second' WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": runs},
        )
    assert workflow_step(runs, 2) == 2
    assert state(engine, runs) == [("completed", 4, False, 4), ("completed", 2, False, 3)]
    with engine.connect() as connection:
        outcomes = dict(
            connection.execute(
                text(
                    "SELECT run_id::text, outcome FROM workflow_run_steps "
                    "WHERE step = 2 AND run_id = ANY(CAST(:ids AS uuid[]))"
                ),
                {"ids": runs},
            ).all()
        )
    assert outcomes == {delivered: "continued", silent: "stopped"}
