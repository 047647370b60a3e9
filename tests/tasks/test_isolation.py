"""A message its batch step cannot handle fails alone; the other projects' messages of its batch go on."""

from __future__ import annotations

import math
import uuid
from collections import Counter

import pytest
import redis
import sqlalchemy.exc
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app.delivery import dispatch
from tasks.isolation import KILLED_RUNS, UnfinishedRuns, in_halves
from tasks.prepare import prepare_chunk
from tests.conftest import create_project
from tests.faults.stack import insert_accepted, new_project, statuses, wait_until_terminal
from tests.provider_server import json_response


def test_a_poison_fails_alone_and_every_batch_mate_is_handled_once():
    ids = [f"m{i}" for i in range(500)]
    handled: Counter[str] = Counter()
    calls: list[int] = []
    alone: list[tuple[str, str]] = []

    def step(part):
        calls.append(len(part))
        if "m137" in part:
            raise ValueError("no such template version")
        handled.update(part)

    in_halves(ids, step, lambda message_id, why: alone.append((message_id, why)))
    assert alone == [("m137", "could not be processed: ValueError: no such template version")]
    assert set(handled) == set(ids) - {"m137"}
    assert set(handled.values()) == {1}
    assert len(calls) <= 1 + 2 * math.ceil(math.log2(len(ids)))


def test_two_poisons_in_one_batch_each_fail_alone():
    alone: list[str] = []

    def step(part):
        if {"b", "g"} & set(part):
            raise KeyError("template")

    in_halves(list("abcdefgh"), step, lambda message_id, _: alone.append(message_id))
    assert sorted(alone) == ["b", "g"]


def test_trouble_of_the_batch_itself_is_raised_whole_not_split():
    calls: list[int] = []

    def step(part):
        calls.append(len(part))
        raise sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))

    with pytest.raises(sqlalchemy.exc.OperationalError):
        in_halves([f"m{i}" for i in range(100)], step, lambda *_: pytest.fail("a batch-wide error failed a message"))
    assert calls == [100]


def poison_counts(client) -> dict[str, float]:
    families = text_string_to_metric_families(client.get("/metrics").get_data(as_text=True))
    return {
        sample.labels["stage"]: sample.value
        for family in families
        if family.name == "tidings_poison_messages"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


@pytest.mark.usefixtures("worker")
def test_a_poisoned_message_of_one_project_fails_alone_and_another_projects_99_are_sent_once(
    client, engine, fake_provider
):
    """The poison: a message pinned to a template version that is not there (prepare cannot
    render it). It shares one prepare task with 99 messages of another project."""
    poisoned_project = create_project(client)
    with engine.begin() as connection:
        poison = connection.execute(
            text(
                """
                WITH m AS (
                    INSERT INTO messages (project_id, channel, status, priority, to_address, template, template_version)
                    VALUES (:project, 'email', 'accepted', 'bulk', 'ada@example.com', 'gone', 7) RETURNING id
                )
                INSERT INTO message_contents (message_id) SELECT id FROM m RETURNING message_id::text
                """
            ),
            {"project": poisoned_project.id},
        ).scalar_one()
    good = insert_accepted(engine, new_project(engine), 99)
    before = poison_counts(client).get("prepare", 0)
    (task,) = dispatch.prepare([*good[:50], poison, *good[50:]], "bulk")
    task.apply_async()

    seen = wait_until_terminal(engine, [poison, *good], timeout=30)
    assert seen[poison] == "failed"
    assert Counter(seen[i] for i in good) == Counter({"sent": 99})
    ledger = Counter(r.message_id for r in fake_provider.delivered())
    assert [ledger[i] for i in good] == [1] * 99
    assert ledger[poison] == 0
    failed = poisoned_project.get(poison).get_json()
    assert "prepare could not be processed: KeyError" in failed["error"]
    assert [e["type"] for e in failed["events"]][-1] == "failed"
    assert poison_counts(client)["prepare"] == before + 1


@pytest.mark.usefixtures("worker")
def test_a_provider_answer_postgresql_would_refuse_is_still_written(client, engine, fake_provider):
    """A NUL in the provider's message id once made finalise fail for the whole batch, left `sending`."""

    def nul_ids(request):
        results = [
            {"id": m["id"], "status": "accepted", "provider_id": "p\u0000q"} for m in request.get_json()["messages"]
        ]
        return json_response({"results": results})

    fake_provider.override = nul_ids
    ids = insert_accepted(engine, new_project(engine), 3)
    for task in dispatch.prepare(ids, "bulk"):
        task.apply_async()
    assert wait_until_terminal(engine, ids, timeout=30) == dict.fromkeys(ids, "sent")
    with engine.connect() as connection:
        stored = connection.execute(
            text("SELECT DISTINCT provider_message_id FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": ids},
        ).scalars()
        assert list(stored) == ["p\ufffdq"]


@pytest.mark.usefixtures("worker")
def test_a_message_that_cannot_be_built_for_the_provider_fails_alone(client, engine, fake_provider):
    """Its attachment is gone: the provider batch goes out without it, and it fails permanently."""
    ids = insert_accepted(engine, new_project(engine), 3)
    broken = ids[1]
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE message_contents SET attachment_ids = ARRAY[gen_random_uuid()] WHERE message_id = :id"),
            {"id": broken},
        )
    for task in dispatch.prepare(ids, "bulk"):
        task.apply_async()
    seen = wait_until_terminal(engine, ids, timeout=30)
    assert seen == {**dict.fromkeys(ids, "sent"), broken: "failed"}
    ledger = Counter(r.message_id for r in fake_provider.delivered())
    assert [ledger[i] for i in ids] == [1, 0, 1]
    with engine.connect() as connection:
        error = connection.execute(
            text("SELECT error FROM messages WHERE id = CAST(:id AS uuid)"), {"id": broken}
        ).scalar_one()
    assert error.startswith("could not be built for the provider: KeyError")


def test_counts_of_runs_that_died_decide_who_goes_alone_and_who_fails(settings):
    runs = UnfinishedRuns(redis.Redis.from_url(settings.redis_url), f"test-{uuid.uuid4().hex}")
    alone: list[list[str]] = []
    failed: list[tuple[str, str]] = []

    def admit(ids: list[str]) -> bool:
        return runs.admit(ids, lambda part: alone.append(list(part)), lambda i, why: failed.append((i, why)))

    assert admit(["a", "b", "c"])  # no run died yet; this one dies: nothing finishes
    assert not admit(["a", "b", "c"]) and alone == [["a", "b", "c"]]
    assert admit(["a"]) and admit(["b"])
    runs.finish(["a"])
    runs.undo(["b"])  # b was not this run's to take: its one death still counts
    for _ in range(KILLED_RUNS - 1):
        assert admit(["c"])  # c's runs keep dying
    assert not admit(["c"]) and failed == [("c", f"killed its worker {KILLED_RUNS} times")]
    assert runs.client.hgetall(runs.key) == {b"b": b"1", b"c": str(KILLED_RUNS + 1).encode()}
    runs.undo(["b"])
    assert runs.client.hgetall(runs.key) == {b"c": str(KILLED_RUNS + 1).encode()}  # no count of none is kept
    runs.client.delete(runs.key)


def test_a_prepare_run_that_finds_a_message_held_by_another_run_keeps_that_runs_count(migrated, engine):
    """The sweeper may dispatch a message again while a run holds it. The second run skips it
    and must not forget the deaths counted on it, or a message that kills every worker that
    takes it would never be failed."""
    held, free = insert_accepted(engine, new_project(engine), 2)
    runs = UnfinishedRuns(redis.Redis.from_url(migrated.redis_url), "prepare")
    runs.client.hset(runs.key, mapping={held: KILLED_RUNS - 2, free: KILLED_RUNS - 2})
    with engine.connect() as holder:
        holder.execute(text("SELECT 1 FROM messages WHERE id = CAST(:id AS uuid) FOR UPDATE"), {"id": held})
        prepare_chunk(migrated, [held], "bulk")
        assert runs.client.hget(runs.key, held) == str(KILLED_RUNS - 2).encode()
        holder.rollback()
    prepare_chunk(migrated, [free], "bulk")
    prepare_chunk(migrated, [held], "bulk")
    assert runs.client.hmget(runs.key, [held, free]) == [None, None]
    prepared = statuses(engine, [held, free])
    assert prepared.keys() == {held, free} and "accepted" not in prepared.values()
