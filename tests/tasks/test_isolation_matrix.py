"""The isolation door for every task kind: two projects' items in the same task run, one
poisoned, one good. The good project's item goes on exactly once, the poisoned one ends
failed with its reason, and `poison_messages` counts it under the task's stage. The task
functions run in this process against the real PostgreSQL and Redis; what they publish
goes to the broker, where a worker of the session (if one runs) may take it.

Errors are classified by who caused them (tasks/isolation.py `batch_wide`): the classes
are checked here against errors the real PostgreSQL raises for them.
"""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
import sqlalchemy.exc
from celery.canvas import Signature
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from app.config import Settings
from app.delivery.fairness import FairChunks
from app.delivery.webhook_store import webhook_id
from app.observability.counters import HASH, labels_text
from tasks.deliver import deliver_batch
from tasks.fanout import fan_out
from tasks.isolation import KILLED_RUNS, UnfinishedRuns, batch_wide
from tasks.maintenance import redispatch_stalled as stalled_messages
from tasks.prepare import prepare_chunk
from tasks.reports import Item, apply_all
from tasks.webhooks import deliver_webhooks
from tasks.webhooks import release as release_webhook_deliveries
from tasks.workflows import redispatch_stalled, release_parked, workflow_step
from tests.api.test_topics import copy_of_batch, scheduled_topic_send, written
from tests.api.test_workflows import save, setup
from tests.conftest import closed_port, create_project
from tests.faults.stack import insert_accepted, statuses, wait_until_terminal
from tests.tasks.test_webhooks import Receiver, endpoint
from tests.tasks.test_workflows import runs_for, state

# A token no btree index takes: PostgreSQL refuses its suppression (SQLSTATE 54000, which
# psycopg2 raises as an OperationalError) though the address is one tenant's data.
LONG_TOKEN_CHARS = 4000


def poisoned(client: redis.Redis, stage: str) -> int:
    return int(client.hget(HASH, f"poison_messages|{labels_text({'stage': stage})}") or 0)


@pytest.fixture
def counters(migrated: Settings) -> redis.Redis:
    return redis.Redis.from_url(migrated.redis_url)


def error_of(engine, id_: str, table: str = "messages", column: str = "error") -> str | None:
    with engine.connect() as connection:
        return connection.execute(
            text(f"SELECT {column} FROM {table} WHERE id = CAST(:id AS uuid)"), {"id": id_}
        ).scalar_one()


def new_project(engine, channels: str = "email,sms,push") -> str:
    project_id = f"i-{uuid.uuid4().hex[:10]}"
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO projects (id, name, channels) VALUES (:id, 'Isolation', string_to_array(:c, ','))"),
            {"id": project_id, "c": channels},
        )
    return project_id


def insert_push(engine, project_id: str, token: str) -> str:
    """One accepted push to a raw device token, as the API writes it."""
    with engine.begin() as connection:
        return connection.execute(
            text(
                """
                WITH m AS (
                    INSERT INTO messages (project_id, channel, status, priority, to_address)
                    VALUES (:project, 'push', 'accepted', 'transactional', :token) RETURNING id
                )
                INSERT INTO message_contents (message_id, subject, text) SELECT id, 'Hi', 'Hello' FROM m
                RETURNING message_id::text
                """
            ),
            {"project": project_id, "token": token},
        ).scalar_one()


def insert_gone_template(engine, project_id: str) -> str:
    """An accepted email pinned to a template version that is not there: prepare cannot render it."""
    with engine.begin() as connection:
        return connection.execute(
            text(
                """
                WITH m AS (
                    INSERT INTO messages (project_id, channel, status, priority, to_address, template, template_version)
                    VALUES (:project, 'email', 'accepted', 'transactional', 'ada@example.com', 'gone', 7) RETURNING id
                )
                INSERT INTO message_contents (message_id) SELECT id FROM m RETURNING message_id::text
                """
            ),
            {"project": project_id},
        ).scalar_one()


def test_prepare_fails_the_poison_alone_and_prepares_the_other_projects_message(client, engine, migrated, counters):
    poison = insert_gone_template(engine, new_project(engine))
    (good,) = insert_accepted(engine, new_project(engine), 1, priority="transactional")
    before = poisoned(counters, "prepare")
    prepare_chunk(migrated, [poison, good], "transactional")
    seen = statuses(engine, [poison, good])
    assert seen[poison] == "failed"
    assert seen[good] not in ("accepted", "failed")
    assert error_of(engine, poison).startswith("prepare could not be processed: KeyError")
    assert poisoned(counters, "prepare") == before + 1


def test_a_simulated_push_token_too_long_to_suppress_fails_alone_in_finalise(client, engine, migrated, counters):
    """The permanent failure suppresses the token; PostgreSQL refuses an index row that long
    (54000, an OperationalError to psycopg2): that is the token's trouble, not the batch's."""
    long_token = "simulator:permanent-failure:" + secrets.token_hex(LONG_TOKEN_CHARS // 2)
    poison = insert_push(engine, new_project(engine), long_token)
    good = insert_push(engine, new_project(engine), f"simulator:delivered:{uuid.uuid4().hex}")
    before = poisoned(counters, "finalise")
    prepare_chunk(migrated, [poison, good], "transactional")
    # A worker of the session may have taken them first; then this call finds nothing to claim.
    deliver_batch(migrated, "simulator", [poison, good], "transactional")
    seen = wait_until_terminal(engine, [poison, good], timeout=30)
    assert seen[poison] == "failed"
    assert seen[good] in ("sent", "delivered")
    with engine.connect() as connection:
        attempts = connection.execute(
            text("SELECT attempts FROM messages WHERE id = CAST(:id AS uuid)"), {"id": good}
        ).scalar_one()
    assert attempts == 1
    assert error_of(engine, poison).startswith("finalise could not be processed: OperationalError")
    assert poisoned(counters, "finalise") == before + 1


# The engine bounds a time in the data before any arithmetic (app/workflows/engine.py), so the
# poison is a delay stored before offsets were bounded: 10^15 s is past what a timedelta holds.
SOON = {"when": "2020-01-01T00:00:00+00:00", "what": "x"}
DELAY_UNTIL_WHEN = [{"delay": {"until": "{{ when }}", "offset": "1s"}}]
UNBOUNDED_OFFSET = """
    UPDATE workflows w SET compiled = jsonb_set(w.compiled, '{steps,0,offset}', '1000000000000000')
    FROM workflow_runs r
    WHERE r.id = CAST(:id AS uuid)
      AND (w.project_id, w.key, w.version) = (r.project_id, r.workflow_key, r.workflow_version)
"""


def workflow_runs(client, migrated, steps, data) -> tuple[object, str]:
    """A project of its own with the workflow `steps`, and one run of it for u1 with `data`."""
    project = create_project(client)
    setup(project, ["u1"])
    version = save(project, steps)["version"]
    (run_id,) = runs_for(project, migrated, version, ["u1"], data)
    return project, run_id


def test_a_workflow_step_fails_the_poisoned_run_alone_and_moves_the_other_projects_run(
    client, engine, migrated, counters
):
    _, poison = workflow_runs(client, migrated, DELAY_UNTIL_WHEN, SOON)
    _, good = workflow_runs(client, migrated, [{"delay": {"for": "1s"}}], {"what": "x"})
    with engine.begin() as connection:
        assert connection.execute(text(UNBOUNDED_OFFSET), {"id": poison}).rowcount == 1
    before = poisoned(counters, "workflow_step")
    assert workflow_step([poison, good], 0) == 1
    assert state(engine, [poison]) == [("failed", 0, False, 0)]
    assert state(engine, [good])[0][:2] in (("running", 1), ("completed", 1))
    reason = error_of(engine, poison, "workflow_runs", "reason")
    assert reason.startswith("step 0 could not be processed: OverflowError")
    assert poisoned(counters, "workflow_step") == before + 1
    with engine.connect() as connection:
        ended = connection.execute(
            text(
                "SELECT data->>'status', data->>'reason' FROM events "
                "WHERE type = 'workflow.completed' AND data->>'run_id' = :id"
            ),
            {"id": poison},
        ).all()
    assert ended == [("failed", reason)]


def published(migrated: Settings, release: Callable[[Session], object]) -> list[list[str]]:
    """The ids each task or chunk carries that `release` publishes, in a transaction rolled back after."""
    engine = create_engine(migrated.database_url)
    try:
        with engine.connect() as connection, connection.begin() as outer:
            with Session(connection, join_transaction_mode="create_savepoint") as session:
                release(session)
                carried = [ids for task in outbox(session) for ids in carried_by(task)]
            outer.rollback()
    finally:
        engine.dispose()
    return [list(ids) for ids in carried]


def carried_by(task: Signature | FairChunks) -> list[list[str]]:
    """A task's list of ids; for lanes taken in turn, each project's chunk (a token takes them in turn)."""
    if isinstance(task, FairChunks):
        return [list(chunk) for _, chunk in task.pieces]
    return [next(a for a in task.args if isinstance(a, list))]


def outbox(session: Session) -> list:
    return list(session.info.get("outbox", []))


def projects_per_task(carried: list[list[str]], owner: dict[str, str]) -> list[list[str]]:
    """For each published task that carries any of `owner`'s ids, the projects of those ids."""
    found = [sorted({owner[i] for i in ids if i in owner}) for ids in carried]
    return sorted(projects for projects in found if projects)


@pytest.mark.parametrize("release", ["parked", "stalled"])
def test_beat_and_the_sweeper_release_each_projects_runs_in_tasks_of_their_own(client, engine, migrated, release):
    """Two projects' runs at the same step: each task beat or the sweeper publishes carries one project's."""
    a, a_run = workflow_runs(client, migrated, [{"delay": {"for": "1h"}}], {"what": "x"})
    b, b_run = workflow_runs(client, migrated, [{"delay": {"for": "1h"}}], {"what": "x"})
    runs = [a_run, b_run]
    if release == "parked":
        assert workflow_step(runs, 0) == 2
        moved = "UPDATE workflow_runs SET due_at = now() - interval '1 second' WHERE id = ANY(CAST(:ids AS uuid[]))"
    else:
        moved = "UPDATE workflow_runs SET updated_at = now() - interval '1 hour' WHERE id = ANY(CAST(:ids AS uuid[]))"
    with engine.begin() as connection:
        connection.execute(text(moved), {"ids": runs})
    if release == "parked":
        carried = published(migrated, release_parked)
    else:
        carried = published(migrated, lambda session: redispatch_stalled(session, 60))
    with engine.begin() as connection:  # no other test's beat may find them
        connection.execute(
            text("UPDATE workflow_runs SET status = 'cancelled' WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": runs}
        )
    assert projects_per_task(carried, {a_run: a.id, b_run: b.id}) == sorted([[a.id], [b.id]])


def test_the_sweeper_dispatches_each_projects_stalled_messages_in_tasks_of_their_own(client, engine, migrated):
    """Two projects' transactional messages stalled on one lane: one chunk per project, taken in turn."""
    owner = {}
    for project in (new_project(engine), new_project(engine)):
        for message_id in insert_accepted(engine, project, 2, priority="transactional"):
            owner[message_id] = project
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = 'ready', provider = 'fake', updated_at = now() - interval '1 hour' "
                "WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": list(owner)},
        )
    carried = published(migrated, lambda session: stalled_messages(session, 60))
    with engine.begin() as connection:  # no other test's sweeper may find them
        connection.execute(
            text("UPDATE messages SET status = 'cancelled' WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": list(owner)}
        )
    assert projects_per_task(carried, owner) == sorted([[p] for p in set(owner.values())])


@pytest.fixture
def postgres(migrated: Settings) -> Iterator:
    engine = create_engine(migrated.database_url)
    yield engine
    engine.dispose()


def raised(postgres, statement: str) -> sqlalchemy.exc.DBAPIError:
    with pytest.raises(sqlalchemy.exc.DBAPIError) as caught, postgres.connect() as connection:
        connection.execute(text(statement))
    return caught.value


A_ROW_OF_4000 = "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 125) AS g)"


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TEMP TABLE t (v varchar(3)); INSERT INTO t VALUES ('abcdef')",  # value too long: 22001
        "SELECT 2147483647::int + 1",  # integer out of range: 22003
        "SELECT timestamptz '294276-12-31' + interval '1 year'",  # timestamp out of range: 22008
        "SELECT 'not a number'::int",  # invalid text: 22P02
        f"CREATE TEMP TABLE i (v text PRIMARY KEY); INSERT INTO i VALUES ({A_ROW_OF_4000})",  # index row: 54000
    ],
)
def test_an_error_a_rows_data_causes_is_that_items_own(postgres, statement):
    assert not batch_wide(raised(postgres, statement))


@pytest.mark.parametrize("error", [OverflowError("date value out of range"), ValueError("year 10000 is out of range")])
def test_pythons_own_data_errors_are_the_items(error):
    assert not batch_wide(error)


def test_a_terminated_backend_is_the_batchs_trouble(postgres):
    with postgres.connect() as connection:
        pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with postgres.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(sqlalchemy.exc.DBAPIError) as caught:
            connection.execute(text("SELECT 1"))
    assert batch_wide(caught.value)


def test_a_deadlock_is_the_batchs_trouble(postgres):
    """Two transactions take two locks in opposite orders; PostgreSQL breaks the cycle (40P01).
    Advisory locks on keys of this test's own, so it writes no table another test would see."""
    first_key, second_key = (secrets.randbits(62) for _ in range(2))
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def lock(first: int, second: int) -> None:
        try:
            with postgres.begin() as connection:
                connection.execute(text("SET LOCAL deadlock_timeout = '100ms'"))
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": first})
                barrier.wait(timeout=10)
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": second})
        except sqlalchemy.exc.DBAPIError as error:
            errors.append(error)

    threads = [threading.Thread(target=lock, args=pair) for pair in ((first_key, second_key), (second_key, first_key))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    (error,) = errors
    assert error.orig.pgcode == "40P01"
    assert batch_wide(error)


def test_redis_out_of_reach_is_the_batchs_trouble():
    with pytest.raises(redis.exceptions.ConnectionError) as caught:
        redis.Redis(port=closed_port(), socket_connect_timeout=1).ping()
    assert batch_wide(caught.value)


def test_a_webhook_delivery_that_cannot_be_signed_fails_alone_and_the_other_projects_is_posted_once(
    client, engine, migrated, counters, httpserver
):
    """Project A's endpoint secret no longer decrypts (written past the API, or under a key
    since rotated away): its delivery fails alone; B's, in the same task, is posted once."""
    receiver = Receiver(httpserver)
    a, b = create_project(client), create_project(client)
    delivery = {}
    for project in (a, b):
        hook = endpoint(project, receiver.url)
        with engine.begin() as connection:
            delivery[project.id] = connection.execute(
                text(
                    """
                    INSERT INTO webhook_deliveries (endpoint_id, project_id, events)
                    VALUES (CAST(:endpoint AS uuid), :project, CAST(:events AS jsonb)) RETURNING id::text
                    """
                ),
                {"endpoint": hook["id"], "project": project.id, "events": '[{"type": "test"}]'},
            ).scalar_one()
            if project is a:
                connection.execute(
                    text("UPDATE webhook_endpoints SET secret = 'not a secret' WHERE id = CAST(:id AS uuid)"),
                    {"id": hook["id"]},
                )
    before = poisoned(counters, "webhooks")
    deliver_webhooks([delivery[a.id], delivery[b.id]])
    assert [r["id"] for r in receiver.received] == [webhook_id(delivery[b.id])]
    with engine.connect() as connection:
        ended = dict(
            connection.execute(
                text(
                    """
                    SELECT d.id::text, d.status || ': ' || COALESCE(string_agg(a.error, '; '), '')
                    FROM webhook_deliveries d LEFT JOIN webhook_attempts a ON a.delivery_id = d.id
                    WHERE d.id = ANY(CAST(:ids AS uuid[])) GROUP BY d.id
                    """
                ),
                {"ids": list(delivery.values())},
            ).all()
        )
    assert ended[delivery[b.id]] == "succeeded: "
    assert ended[delivery[a.id]].startswith("failed: webhooks could not be processed: InvalidToken")
    assert poisoned(counters, "webhooks") == before + 1


def sent_message(engine, project_id: str) -> str:
    """A message the simulator took, waiting for its reports."""
    (message_id,) = insert_accepted(engine, project_id, 1, priority="transactional")
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET status = 'sent', provider = 'simulator', provider_message_id = :pid "
                "WHERE id = CAST(:id AS uuid)"
            ),
            {"id": message_id, "pid": f"sim-{message_id}"},
        )
    return message_id


def test_a_report_that_cannot_be_applied_is_left_out_alone_and_the_other_projects_apply(
    client, engine, migrated, counters
):
    """A report kind this worker does not know (a newer one's, during a rolling deploy)
    shares a reports task with another project's delivered and opened reports."""
    a, b = new_project(engine), new_project(engine)
    poison, good = sent_message(engine, a), sent_message(engine, b)
    before = poisoned(counters, "reports")
    apply_all(
        migrated,
        "simulator",
        [
            Item(poison, a, f"sim-{poison}", "teleported", ""),
            Item(good, b, f"sim-{good}", "delivered", ""),
            Item(poison, a, f"sim-{poison}", "delivered", ""),
            Item(good, b, f"sim-{good}", "opened", ""),
        ],
    )
    assert statuses(engine, [poison, good]) == {poison: "sent", good: "delivered"}
    with engine.connect() as connection:
        opened = connection.execute(
            text("SELECT count(*) FROM message_engagements WHERE message_id = CAST(:id AS uuid) AND kind = 'opened'"),
            {"id": good},
        ).scalar_one()
    assert opened == 1
    assert poisoned(counters, "reports") == before + 1


def test_a_topic_fan_out_that_cannot_go_on_ends_alone_instead_of_failing_at_every_sweep(
    client, engine, migrated, counters
):
    """A topic send whose stored columns PostgreSQL refuses (a category longer than its
    column, written past the API's check): its fan-out ends, counted; another project's
    fan-out writes all its members."""
    poisoned_project, good_project = create_project(client), create_project(client)
    poison = copy_of_batch(engine, scheduled_topic_send(poisoned_project, engine, 3))
    good = copy_of_batch(engine, scheduled_topic_send(good_project, engine, 3))
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE batches SET fanout = fanout || jsonb_build_object('category', repeat('c', 300)) WHERE id = :b"
            ),
            {"b": poison},
        )
    before = poisoned(counters, "fan_out")
    assert fan_out(poison) == 0
    assert fan_out(good) == 3
    assert written(engine, poison) == (0, 0) and written(engine, good) == (3, 3)
    with engine.connect() as connection:
        done = connection.execute(
            text("SELECT fanout_done_at IS NOT NULL FROM batches WHERE id = :b"), {"b": poison}
        ).scalar_one()
    assert done  # the sweeper no longer takes it up
    assert poisoned(counters, "fan_out") == before + 1


def test_beat_releases_each_projects_webhook_deliveries_in_tasks_of_their_own(client, engine, migrated):
    owner = {}
    for project in (create_project(client), create_project(client)):
        hook = endpoint(project, "http://127.0.0.1:9/hook")
        with engine.begin() as connection:
            for _ in range(2):
                delivery = connection.execute(
                    text(
                        """
                        INSERT INTO webhook_deliveries (endpoint_id, project_id, events, next_attempt_at)
                        VALUES (CAST(:endpoint AS uuid), :project, '[{"type": "test"}]', now() - interval '1 hour')
                        RETURNING id::text
                        """
                    ),
                    {"endpoint": hook["id"], "project": project.id},
                ).scalar_one()
                owner[delivery] = project.id
    carried = published(migrated, release_webhook_deliveries)
    with engine.begin() as connection:  # no other test's beat may find them
        connection.execute(
            text("UPDATE webhook_deliveries SET status = 'failed' WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": list(owner)},
        )
    assert projects_per_task(carried, owner) == sorted([[p] for p in set(owner.values())])


def test_a_workflow_run_that_keeps_killing_its_worker_is_failed_without_another_try(client, engine, migrated, counters):
    """Its runs died KILLED_RUNS times (counted as prepare's and deliver's are): the step
    task fails it with the reason instead of running it again."""
    _, run_id = workflow_runs(client, migrated, [{"delay": {"for": "1s"}}], {"what": "x"})
    key = UnfinishedRuns(counters, "workflow_step").key
    counters.hset(key, run_id, KILLED_RUNS)
    assert workflow_step([run_id], 0) == 0
    assert state(engine, [run_id]) == [("failed", 0, False, 0)]
    assert error_of(engine, run_id, "workflow_runs", "reason") == f"step 0 killed its worker {KILLED_RUNS} times"
    assert counters.hget(key, run_id) is None


def test_a_workflow_step_that_skips_a_run_another_task_holds_keeps_that_runs_deaths(client, engine, migrated, counters):
    """The step locks its runs SKIP LOCKED: a run another task holds is not its own to
    finish, or the deaths counted on it would be forgotten."""
    _, run_id = workflow_runs(client, migrated, [{"delay": {"for": "1s"}}], {"what": "x"})
    key = UnfinishedRuns(counters, "workflow_step").key
    counters.hset(key, run_id, KILLED_RUNS - 2)
    try:
        with engine.connect() as holder:
            holder.execute(text("SELECT 1 FROM workflow_runs WHERE id = CAST(:id AS uuid) FOR UPDATE"), {"id": run_id})
            assert workflow_step([run_id], 0) == 0
            assert counters.hget(key, run_id) == str(KILLED_RUNS - 2).encode()
            holder.rollback()
    finally:
        counters.hdel(key, run_id)
