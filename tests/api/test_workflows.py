"""Workflows through the API, run by a real worker: versions, each step kind, the fallback
short form, cancellation, idempotent triggers, and the digest and throttle under concurrency.

Messages are counted from the log provider's own record (SMS) and the inbox (in-app), never
from what the runs say of themselves.
"""

from __future__ import annotations

import secrets
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests
from sqlalchemy import text

from app.db import session_scope
from providers.log import LogProvider
from tasks.workflows import release_parked, workflow_step
from tests.api.test_errors import assert_error_shape
from tests.api.test_topics import make_topic
from tests.conftest import bearer, create_project, email
from tests.waiting import wait_until


def setup(project, subscribers: list[str]) -> dict[str, str]:
    """An in-app and an SMS template, and `subscribers` with a phone each, no other test's:
    the phones by subscriber."""
    prefix = f"+49151{secrets.randbelow(10**4):04}"
    phones = {subscriber: f"{prefix}{index:04}" for index, subscriber in enumerate(subscribers)}
    templates = [
        {"key": "note", "channel": "in_app", "title": "{{ what }}", "body": "{{ what }}"},
        {"key": "digest", "channel": "in_app", "title": "{{ what }}", "body": "{{ count }} new"},
        {"key": "note-sms", "channel": "sms", "text": "{{ what }}"},
    ]
    for template in templates:
        assert project.call("POST", "/v1/templates", template).status_code == 201
    for subscriber in subscribers:
        answer = project.call("PUT", f"/v1/subscribers/{subscriber}", {"phone": phones[subscriber]})
        assert answer.status_code in (200, 201)
    return phones


def save(project, steps: list[dict[str, Any]], key: str = "alerts") -> dict[str, Any]:
    answer = project.call("PUT", f"/v1/workflows/{key}", {"name": key.title(), "steps": steps})
    assert answer.status_code in (200, 201), answer.get_json()
    return answer.get_json()


def trigger(project, recipients: Any, key: str = "alerts", **body: Any) -> dict[str, Any]:
    answer = project.call("POST", f"/v1/workflows/{key}/trigger", {"recipients": recipients, **body})
    assert answer.status_code == 202, answer.get_json()
    return answer.get_json()


def runs_of(engine, trigger_id: str) -> list[dict[str, Any]]:
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT id::text, subscriber_id, status, step FROM workflow_runs WHERE trigger_id = :t ORDER BY 2"),
            {"t": trigger_id},
        )
        return [dict(row._mapping) for row in rows]


def wait_for_runs(engine, trigger_id: str, statuses: set[str], timeout: float = 30) -> list[dict[str, Any]]:
    """The trigger's runs once every one has a status in `statuses`."""
    return wait_until(
        lambda: runs_of(engine, trigger_id),
        lambda runs: runs and all(run["status"] in statuses for run in runs),
        timeout,
        f"runs of {trigger_id} in {statuses}",
        every=0.1,
    )


def sms_to(phone: str) -> list[str]:
    return [outbound.text for outbound in LogProvider.record if outbound.to == phone]


def inbox(project, subscriber: str) -> list[dict[str, Any]]:
    return project.call("GET", f"/v1/subscribers/{subscriber}/inbox").get_json()["items"]


def test_saving_makes_a_version_per_change_and_the_same_steps_change_nothing(project):
    setup(project, [])
    steps = [{"send": {"channel": "sms", "template": "note-sms"}}]
    first = project.call("PUT", "/v1/workflows/alerts", {"name": "Alerts", "steps": steps})
    assert (first.status_code, first.get_json()["version"]) == (201, 1)
    again = project.call("PUT", "/v1/workflows/alerts", {"name": "Alerts", "steps": steps})
    assert (again.status_code, again.get_json()["version"]) == (200, 1)
    changed = save(project, [{"delay": {"for": "1m"}}, *steps])
    assert changed["version"] == 2
    assert project.call("GET", "/v1/workflows/alerts").get_json()["steps"] == [{"delay": {"for": "1m"}}, *steps]
    assert project.call("GET", "/v1/workflows/alerts?version=1").get_json()["steps"] == steps
    assert project.call("GET", "/v1/workflows/alerts?version=3").status_code == 404


@pytest.mark.parametrize(
    ("steps", "errors"),
    [
        ([], {"steps": {"_schema": ["Give 1 to 20 steps."]}}),
        (
            [{"wait": {}}],
            {
                "steps": {
                    "0": {
                        "_schema": ["A step is an object with one key: one of send, delay, branch, digest, throttle."]
                    }
                }
            },
        ),
        (
            [{"delay": {"for": "ten minutes"}}],
            {"steps": {"0": {"delay": {"for": ['Give a duration from 0s to 30d, as "90s", "10m", "2h" or "1d".']}}}},
        ),
        (
            [{"delay": {"until": "{{ call.at }}", "offset": "31d"}}],
            {
                "steps": {
                    "0": {"delay": {"offset": ['Give a duration from -30d to 30d, as "90s", "10m", "2h" or "1d".']}}
                }
            },
        ),
        (
            [{"delay": {"until": "9999-12-31T23:59:59+00:00"}}],
            {"steps": {"0": {"delay": {"until": ['Give a reference to the trigger\'s data, as "{{ name }}".']}}}},
        ),
        (
            [{"branch": {"unless": {"was": "opened"}}}],
            {"steps": {"0": {"branch": {"unless": ['"was" needs a send step before the branch.']}}}},
        ),
        ([{"send": {"channel": "sms", "template": "nope"}}], {"steps": ["Unknown template 'nope'."]}),
        (
            [{"send": {"channel": "email", "template": "note-sms"}}],
            {"steps": ["Template 'note-sms' is for sms, not email."]},
        ),
        (
            [{"throttle": {"limit": 0, "window": "1d"}}],
            {"steps": {"0": {"throttle": {"limit": ["Give a whole number from 1 to 10,000."]}}}},
        ),
        (
            [
                {
                    "send": {
                        "channels": ["push", "sms"],
                        "templates": {"sms": "note-sms"},
                        "fallback_after": "1m",
                        "unless": "read",
                    }
                }
            ],
            {"steps": {"0": {"send": {"templates": ["Give a template key for each channel: {channel: template}."]}}}},
        ),
    ],
)
def test_a_bad_definition_is_422_naming_the_step_and_saves_nothing(project, steps, errors):
    setup(project, [])
    answer = project.call("PUT", "/v1/workflows/alerts", {"name": "Alerts", "steps": steps})
    assert assert_error_shape(answer, 422)["errors"]["json"] == errors
    assert project.call("GET", "/v1/workflows/alerts").status_code == 404


def test_a_trigger_for_an_unknown_subscriber_starts_nothing_and_a_replay_answers_the_same(project, engine):
    setup(project, ["u1"])
    save(project, [{"delay": {"for": "1d"}}])
    unknown = project.call("POST", "/v1/workflows/alerts/trigger", {"recipients": ["u1", "ghost"]})
    assert assert_error_shape(unknown, 422)["errors"]["json"] == {"recipients": ["1 unknown subscribers: 'ghost'."]}
    assert project.call("POST", "/v1/workflows/nope/trigger", {"recipients": ["u1"]}).status_code == 404
    body = {"recipients": ["u1", "u1"], "data": {"what": "hi"}}
    headers = {"Idempotency-Key": "t-1"}
    first = project.client.post(
        "/v1/workflows/alerts/trigger", json=body, headers={**bearer(project.live_key), **headers}
    )
    again = project.client.post(
        "/v1/workflows/alerts/trigger", json=body, headers={**bearer(project.live_key), **headers}
    )
    other = project.client.post(
        "/v1/workflows/alerts/trigger", json={**body, "data": {}}, headers={**bearer(project.live_key), **headers}
    )
    assert (first.status_code, again.status_code, other.status_code) == (202, 202, 409)
    assert again.get_json() == first.get_json() and first.get_json()["runs"] == 1
    assert again.headers["Idempotent-Replayed"] == "true"
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM workflow_runs")).scalar() >= 1
        mine = connection.execute(
            text("SELECT count(*) FROM workflow_runs WHERE trigger_id = :t"), {"t": first.get_json()["trigger_id"]}
        ).scalar()
    assert mine == 1


def test_trigger_data_nested_deeper_than_32_is_422_and_starts_nothing(project, engine):
    """930 levels was a 500: SQLAlchemy's JSON encoder ran out of stack writing the trigger."""
    setup(project, ["u1"])
    save(project, [{"delay": {"for": "1d"}}])
    answers = {}
    for lists in (31, 32, 930):  # the data object itself is one level
        body = '{"recipients": ["u1"], "data": {"a": ' + "[" * lists + "]" * lists + "}}"
        headers = {**bearer(project.live_key), "Content-Type": "application/json"}
        answers[lists] = project.client.post("/v1/workflows/alerts/trigger", data=body, headers=headers)
    assert answers[31].status_code == 202
    for lists in (32, 930):
        errors = assert_error_shape(answers[lists], 422)["errors"]["json"]
        assert errors == {"data": ["Objects and lists nested at most 32 deep."]}
    with engine.connect() as connection:
        runs = connection.execute(text("SELECT count(*) FROM workflow_runs WHERE project_id = :p"), {"p": project.id})
        assert runs.scalar() == 1


@pytest.mark.usefixtures("worker")
def test_the_fallback_sends_sms_only_to_whoever_did_not_read_the_in_app_message(project, engine):
    phones = setup(project, ["u1", "u2"])
    fallback = {"channels": ["in_app", "sms"], "templates": {"in_app": "note", "sms": "note-sms"}}
    save(project, [{"send": {**fallback, "fallback_after": "3s", "unless": "read"}}])
    started = trigger(project, ["u1", "u2"], data={"what": "Reply from Ada"})
    assert started["runs"] == 2
    first = wait_until(lambda: inbox(project, "u1"), lambda items: len(items) == 1, 20, "u1's in-app message")
    read = project.call("POST", f"/v1/subscribers/u1/inbox/{first[0]['id']}/read")
    assert read.status_code in (200, 204)
    runs = {run["subscriber_id"]: run for run in wait_for_runs(engine, started["trigger_id"], {"completed"})}
    wait_until(lambda: sms_to(phones["u2"]), lambda sent: len(sent) == 1, 20, "u2's SMS")
    assert sms_to(phones["u1"]) == []
    assert sms_to(phones["u2"]) == ["Reply from Ada"]
    assert [len(inbox(project, s)) for s in ("u1", "u2")] == [1, 1]
    shown = project.call("GET", f"/v1/workflow-runs/{runs['u2']['id']}").get_json()
    assert [(s["kind"], s["outcome"]) for s in shown["steps"]] == [
        ("send", "sent"),
        ("delay", "waited"),
        ("branch", "continued"),
        ("send", "sent"),
    ]
    assert shown["steps"][3]["message_id"] and shown["status"] == "completed"
    stopped = project.call("GET", f"/v1/workflow-runs/{runs['u1']['id']}").get_json()
    assert [s["outcome"] for s in stopped["steps"]] == ["sent", "waited", "stopped"]
    completed = project.call("GET", "/v1/events?type=workflow.completed").get_json()["items"]
    assert sorted((e["data"]["subscriber_id"], e["data"]["status"]) for e in completed) == [
        ("u1", "completed"),
        ("u2", "completed"),
    ]
    sends = [e for e in project.call("GET", "/v1/events?type=workflow.step").get_json()["items"] if e["message_id"]]
    assert sorted(e["message_id"] for e in sends) == sorted(
        step["message_id"] for run in (shown, stopped) for step in run["steps"] if step["message_id"]
    )


@pytest.mark.usefixtures("worker")
def test_a_branch_on_the_data_goes_on_only_where_it_holds(project, engine):
    phones = setup(project, ["u1", "u2"])
    save(
        project,
        [
            {
                "branch": {
                    "if": {"all": [{"field": "data.plan", "eq": "pro"}, {"field": "subscriber.phone", "exists": True}]}
                }
            },
            {"send": {"channel": "sms", "template": "note-sms"}},
        ],
    )
    pro = trigger(project, ["u1"], data={"plan": "pro", "what": "Pro news"})
    free = trigger(project, ["u2"], data={"plan": "free", "what": "Free news"})
    wait_for_runs(engine, pro["trigger_id"], {"completed"})
    wait_for_runs(engine, free["trigger_id"], {"completed"})
    wait_until(lambda: sms_to(phones["u1"]), lambda sent: len(sent) == 1, 20, "u1's SMS")
    assert (sms_to(phones["u1"]), sms_to(phones["u2"])) == (["Pro news"], [])


@pytest.mark.usefixtures("worker")
def test_a_run_cancelled_during_its_delay_sends_nothing_after_the_cancel(project, engine):
    phones = setup(project, ["u1", "u2"])
    steps = [
        {"send": {"channel": "in_app", "template": "note"}},
        {"delay": {"for": "3s"}},
        {"send": {"channel": "sms", "template": "note-sms"}},
    ]
    save(project, steps)
    started = trigger(project, ["u1", "u2"], data={"what": "Reminder"}, trigger_key="order-17")
    wait_until(
        lambda: runs_of(engine, started["trigger_id"]),
        lambda runs: len(runs) == 2 and all(r["step"] == 2 for r in runs),
        20,
        "both runs waiting at the last step",
    )
    answer = project.call("POST", "/v1/workflows/alerts/cancel", {"trigger_key": "order-17", "recipients": ["u1"]})
    assert answer.get_json() == {"cancelled": 1}
    runs = {r["subscriber_id"]: r for r in wait_for_runs(engine, started["trigger_id"], {"completed", "cancelled"})}
    assert (runs["u1"]["status"], runs["u2"]["status"]) == ("cancelled", "completed")
    # The cancelled run's step, run again by hand as a late or repeated task would, moves nothing.
    assert workflow_step([runs["u1"]["id"]], runs["u1"]["step"]) == 0
    wait_until(lambda: sms_to(phones["u2"]), lambda sent: len(sent) == 1, 20, "u2's SMS")
    assert sms_to(phones["u1"]) == []
    again = project.call("POST", "/v1/workflows/alerts/cancel", {"trigger_key": "order-17"})
    assert again.get_json() == {"cancelled": 0}


@pytest.mark.usefixtures("worker")
def test_a_run_whose_message_fails_to_render_fails_alone(project, engine):
    phones = setup(project, ["u1", "u2"])
    assert (
        project.call("POST", "/v1/templates", {"key": "strict", "channel": "sms", "text": "{{ 1 // n }}"}).status_code
        == 201
    )
    save(project, [{"send": {"channel": "sms", "template": "strict"}}])
    good = trigger(project, ["u1"], data={"n": 1})
    bad = trigger(project, ["u2"], data={"n": 0})
    for started in (good, bad):
        wait_for_runs(engine, started["trigger_id"], {"completed"})
    statuses = {}
    for started in (good, bad):
        run = runs_of(engine, started["trigger_id"])[0]
        message_id = project.call("GET", f"/v1/workflow-runs/{run['id']}").get_json()["steps"][0]["message_id"]
        statuses[run["subscriber_id"]] = project.wait_for(message_id)["status"]
    assert statuses == {"u1": "sent", "u2": "failed"}
    assert sms_to(phones["u1"]) == ["1"]


@pytest.mark.usefixtures("worker")
def test_a_throttle_lets_exactly_its_limit_through_from_concurrent_triggers(project, engine, live_api):
    phones = setup(project, ["u1"])
    save(project, [{"throttle": {"limit": 3, "window": "1d"}}, {"send": {"channel": "sms", "template": "note-sms"}}])

    def fire(index: int) -> str:
        answer = requests.post(
            f"{live_api}/v1/workflows/alerts/trigger",
            json={"recipients": ["u1"], "data": {"what": f"n{index}"}},
            headers=bearer(project.live_key),
            timeout=30,
        )
        assert answer.status_code == 202
        return answer.json()["trigger_id"]

    with ThreadPoolExecutor(8) as pool:
        triggers = list(pool.map(fire, range(24)))
    ended = Counter(run["status"] for t in triggers for run in wait_for_runs(engine, t, {"completed", "throttled"}))
    assert ended == Counter({"completed": 3, "throttled": 21})
    wait_until(lambda: sms_to(phones["u1"]), lambda sent: len(sent) == 3, 20, "3 SMS")
    assert len(sms_to(phones["u1"])) == 3


@pytest.mark.usefixtures("worker")
@pytest.mark.parametrize(
    ("digest", "triggers", "subscribers"),
    [({"window": "1h"}, 1000, 50), ({"window": "1s"}, 300, 10)],
    ids=["closed-after-all", "closing-meanwhile"],
)
def test_concurrent_triggers_land_in_digests_exactly_once(
    project, engine, migrated, live_api, digest, triggers, subscribers
):
    """8 clients trigger at once; every trigger is in exactly one digest, none lost, none twice.

    An hour's window, closed by hand once every trigger is in: the joins race each other
    only, so each subscriber gets exactly one digest. A 1-second window closes while
    triggers still arrive: the joins race the flushes, and later triggers open the next digest.
    """
    names = [f"u{i}" for i in range(subscribers)]
    setup(project, names)
    save(project, [{"digest": digest}, {"send": {"channel": "in_app", "template": "digest"}}])
    session = requests.Session()

    def fire(index: int) -> str:
        answer = session.post(
            f"{live_api}/v1/workflows/alerts/trigger",
            json={"recipients": [names[index % subscribers]], "data": {"what": "comment", "n": index}},
            headers=bearer(project.live_key),
            timeout=30,
        )
        assert answer.status_code == 202
        return answer.json()["trigger_id"]

    with ThreadPoolExecutor(8) as pool:
        trigger_ids = list(pool.map(fire, range(triggers)))
    if digest["window"] == "1h":
        # A 202 is not a join: a run whose step task ran after its digest's flush would open the
        # next digest and wait its hour there. Close only once every run is in a digest.
        wait_until(lambda: unjoined(engine, project.id), lambda left: left == (triggers, 0), 60, "every run joined")
        with engine.begin() as connection:
            connection.execute(
                text("UPDATE workflow_digests SET closes_at = now() WHERE project_id = :p"), {"p": project.id}
            )
            connection.execute(
                text("UPDATE workflow_runs SET due_at = now() WHERE project_id = :p AND parked"), {"p": project.id}
            )
        with session_scope(migrated.database_url) as session:
            assert release_parked(session) >= subscribers
    ended = Counter()
    for trigger_id in trigger_ids:
        ended.update(run["status"] for run in wait_for_runs(engine, trigger_id, {"completed", "digested"}, 60))
    with engine.connect() as connection:
        digests = connection.execute(
            text(
                """
                SELECT r.subscriber_id, r.data FROM workflow_runs r
                JOIN workflow_triggers t ON t.id = r.trigger_id
                WHERE t.id = ANY(CAST(:ids AS uuid[])) AND r.status = 'completed'
                """
            ),
            {"ids": trigger_ids},
        ).all()
    gathered = Counter(item["n"] for _, data in digests for item in data["items"])
    assert gathered == Counter(range(triggers))  # every trigger once: none lost, none in two digests
    assert sum(data["count"] for _, data in digests) == triggers
    assert ended == Counter({"completed": len(digests), "digested": triggers - len(digests)})
    for subscriber, data in digests:
        assert {item["n"] % subscribers for item in data["items"]} == {names.index(subscriber)}
    per_subscriber = Counter(subscriber for subscriber, _ in digests)
    assert set(per_subscriber) == set(names)
    print(f"\n{digest}: {triggers} triggers for {subscribers} subscribers → {len(digests)} digests")
    if digest["window"] == "1h":
        assert len(digests) == subscribers
    assert {name: len(inbox(project, name)) for name in names} == dict(per_subscriber)


def unjoined(engine, project_id: str) -> tuple[int, int]:
    """The project's runs, and those still running that joined no digest yet."""
    with engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT count(*), count(*) FILTER (WHERE status = 'running' AND digest_id IS NULL) "
                "FROM workflow_runs WHERE project_id = :p"
            ),
            {"p": project_id},
        ).one()
    return tuple(row)


@pytest.mark.usefixtures("worker")
def test_a_trigger_for_a_topic_starts_a_run_per_member(project, engine):
    phones = setup(project, [f"u{i}" for i in range(30)])
    make_topic(project, "crew", [])
    project.call("POST", "/v1/topics/crew/subscribers", {"subscriber_ids": [f"u{i}" for i in range(30)]})
    save(project, [{"send": {"channel": "sms", "template": "note-sms"}}])
    started = trigger(project, {"topic": "crew"}, data={"what": "All hands"})
    assert started["runs"] == 30
    runs = wait_for_runs(engine, started["trigger_id"], {"completed"})
    assert sorted(run["subscriber_id"] for run in runs) == sorted(f"u{i}" for i in range(30))
    for i in range(30):
        wait_until(lambda i=i: sms_to(phones[f"u{i}"]), lambda sent: len(sent) == 1, 20, f"u{i}'s SMS")
    assert all(sms_to(phones[f"u{i}"]) == ["All hands"] for i in range(30))


def test_another_projects_workflow_and_run_are_404(client, project, engine):
    setup(project, ["u1"])
    save(project, [{"delay": {"for": "1d"}}])
    started = trigger(project, ["u1"])
    run_id = runs_of(engine, started["trigger_id"])[0]["id"]
    other = create_project(client)
    assert other.call("GET", "/v1/workflows/alerts").status_code == 404
    assert other.call("GET", f"/v1/workflow-runs/{run_id}").status_code == 404
    assert other.call("POST", "/v1/workflows/alerts/cancel", {"trigger_key": "x"}).status_code == 404
    assert project.call("GET", f"/v1/workflow-runs/{run_id}").status_code == 200


@pytest.mark.usefixtures("worker")
def test_a_delay_until_a_time_in_the_data_waits_for_it_and_a_missing_time_fails_the_run_alone(project, engine):
    phones = setup(project, ["u1", "u2"])
    save(
        project,
        [{"delay": {"until": "{{ call.at }}", "offset": "-1s"}}, {"send": {"channel": "sms", "template": "note-sms"}}],
    )
    at = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
    timed = trigger(project, ["u1"], data={"what": "Your call", "call": {"at": at}})
    untimed = trigger(project, ["u2"], data={"what": "Your call", "call": {}})
    run = wait_for_runs(engine, timed["trigger_id"], {"completed"})[0]
    failed = wait_for_runs(engine, untimed["trigger_id"], {"failed"})[0]
    wait_until(lambda: sms_to(phones["u1"]), lambda sent: len(sent) == 1, 20, "u1's SMS")
    shown = project.call("GET", f"/v1/workflow-runs/{run['id']}").get_json()
    waited_until = datetime.fromisoformat(shown["steps"][0]["detail"]["until"])
    assert waited_until == datetime.fromisoformat(at) - timedelta(seconds=1)
    assert datetime.fromisoformat(shown["steps"][1]["at"]) >= waited_until  # the send came after the wait, not before
    assert project.call("GET", f"/v1/workflow-runs/{failed['id']}").get_json()["reason"] == (
        "delay: data.call.at is not a time with its offset"
    )
    assert sms_to(phones["u2"]) == []


@pytest.mark.usefixtures("worker")
def test_a_delay_until_year_9999_fails_its_run_with_the_reason_and_another_run_sends(project, engine):
    phones = setup(project, ["u1", "u2"])
    save(
        project,
        [{"delay": {"until": "{{ call.at }}", "offset": "1s"}}, {"send": {"channel": "sms", "template": "note-sms"}}],
    )
    poisoned = trigger(project, ["u1"], data={"what": "Your call", "call": {"at": "9999-12-31T23:59:59+00:00"}})
    timed = trigger(project, ["u2"], data={"what": "Your call", "call": {"at": datetime.now(UTC).isoformat()}})
    [failed] = wait_for_runs(engine, poisoned["trigger_id"], {"failed"})
    wait_for_runs(engine, timed["trigger_id"], {"completed"})
    wait_until(lambda: sms_to(phones["u2"]), lambda sent: len(sent) == 1, 20, "u2's SMS")
    shown = project.call("GET", f"/v1/workflow-runs/{failed['id']}").get_json()
    assert shown["reason"] == "delay: data.call.at with its offset is more than a year from now"
    assert [(step["kind"], step["outcome"]) for step in shown["steps"]] == [("delay", "failed")]
    assert sms_to(phones["u1"]) == []


@pytest.mark.usefixtures("worker")
def test_a_send_step_is_bulk_unless_it_says_transactional(project, engine):
    phones = setup(project, ["u1"])
    steps = [
        {"send": {"channel": "in_app", "template": "note"}},
        {"send": {"channel": "sms", "template": "note-sms", "priority": "transactional"}},
    ]
    save(project, steps)
    started = trigger(project, ["u1"], data={"what": "Reply from Ada"})
    [run] = wait_for_runs(engine, started["trigger_id"], {"completed"})
    wait_until(lambda: sms_to(phones["u1"]), lambda sent: len(sent) == 1, 20, "u1's SMS")
    sent = project.call("GET", f"/v1/workflow-runs/{run['id']}").get_json()["steps"]
    priorities = [project.call("GET", f"/v1/messages/{step['message_id']}").get_json()["priority"] for step in sent]
    assert priorities == ["bulk", "transactional"]


@pytest.mark.usefixtures("worker")
def test_another_projects_triggers_do_not_hold_a_transactional_send_behind_their_steps(client, project, engine):
    """A's three triggers of 10,000 runs each, at once, put 60 step tasks in a lane, then B sends
    one email. On the transactional prepare lane, first in, first out, B's went out only once
    A's runs had all moved (0 after it, 3 runs of 3) (a test key's triggers put the victim's p99 at 20 s in the
    noisy-neighbour soak); on the bulk lane, B's prepare goes ahead of A's steps still waiting."""
    subscribers = [f"s{n}" for n in range(10_000)]
    rows = [{"external_id": subscriber} for subscriber in subscribers]
    assert project.call("POST", "/v1/subscribers/import", {"subscribers": rows}).get_json()["rejected"] == []
    setup(project, [])
    save(project, [{"delay": {"for": "1h"}}, {"send": {"channel": "in_app", "template": "note"}}])
    other = create_project(client)
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda _: trigger(project, subscribers), range(3)))
    sent = other.wait_for(other.send(email()).get_json()["id"], {"sent"}, timeout=60)
    moved = wait_until(
        lambda: moved_runs(engine, project.id, sent["id"]),
        lambda counts: counts[0] + counts[1] == 30_000,
        60,
        "A's runs to reach their delay",
    )
    # First in, first out, only the tasks the worker's other three threads held when B's
    # prepare began could finish after it: 1,500 runs at most.
    assert moved[1] > 1_500, f"of A's runs, {moved[0]} moved before B's email was sent and {moved[1]} after"


def moved_runs(engine, project_id: str, message_id: str) -> tuple[int, int]:
    """How many of the project's runs have reached their delay before and after the message was sent."""
    with engine.connect() as connection:
        before, after = connection.execute(
            text(
                """
                SELECT count(*) FILTER (WHERE r.updated_at <= m.sent_at),
                       count(*) FILTER (WHERE r.updated_at > m.sent_at)
                FROM workflow_runs r, messages m
                WHERE r.project_id = :project AND r.parked AND m.id = CAST(:message AS uuid)
                """
            ),
            {"project": project_id, "message": message_id},
        ).one()
    return before, after
