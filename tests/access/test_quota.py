"""Daily quotas against real PostgreSQL and Redis: exact under concurrency, with Redis down,
and after Redis comes back with nothing or with an old state; days end at the project's midnight.

Each accept here is what a service's is: the take and the messages in one transaction, and
what the answer asks for done after the commit (publish) or the rollback (give back), as
app/access/admission.py does. The API's own tests are in tests/api/test_quotas.py, the
gunicorn ones in tests/faults/test_quotas.py.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import TextClause, text
from sqlalchemy.orm import Session, sessionmaker

from app.access.quota import Ask, DailyQuota, Taken, messages_of, quota_day, storage_of
from app.db import session_factory
from app.enums import Channel
from app.redis_client import redis_for
from app.runtime.embedded import EmbeddedRedis

INSERT = text(
    """
    INSERT INTO messages (project_id, channel, status, priority, to_address)
    SELECT :project, 'email', 'accepted', 'bulk', 'user' || g || '@example.com' FROM generate_series(1, :count) AS g
    """
)
# A test key's message whose words and (empty) data store :count bytes, as the storage meter counts them.
STORE = text(
    """
    WITH new AS (
        INSERT INTO messages (project_id, channel, status, priority, to_address, test)
        VALUES (:project, 'email', 'accepted', 'bulk', 'user@example.com', true) RETURNING id
    )
    INSERT INTO message_contents (message_id, text) SELECT id, repeat('x', :count - length('{}{}')) FROM new
    """
)


@pytest.fixture
def db(migrated) -> sessionmaker[Session]:
    return session_factory(migrated.database_url)


@pytest.fixture
def new_project(engine) -> Iterator[Callable[[], str]]:
    """Projects of the test's own, deleted with their messages at its end. The messages here
    are bare rows for the quota to count, with no content and no task: left behind, a fault
    test's sweeper later in the run would dispatch them again and again as load of its own."""
    made: list[str] = []

    def make() -> str:
        project_id = f"q-{uuid.uuid4().hex[:10]}"
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO projects (id, name, channels) VALUES (:id, 'Quota', ARRAY['email'])"),
                {"id": project_id},
            )
        made.append(project_id)
        return project_id

    yield make
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM projects WHERE id = ANY(:ids)"), {"ids": made})


@pytest.fixture
def quota_project(new_project) -> str:
    return new_project()


@pytest.fixture
def own_redis(tmp_path) -> Iterator[EmbeddedRedis]:
    """A Redis of the test's own, to stop and start; a snapshot it saved is back after a start."""
    server = EmbeddedRedis(tmp_path / "redis").start()
    yield server
    server.stop(kill=True)


def accept(
    db: sessionmaker[Session], quota: DailyQuota, ask: Ask, fail: bool = False, *, write: TextClause = INSERT
) -> Taken:
    """Take and write in one transaction (whose write fails, if asked), then publish or give
    back as the answer asks."""
    with db() as session:
        try:
            with session.begin():
                taken = quota.take(session, ask)
                if taken.allowed:
                    session.execute(write, {"project": ask.project_id, "count": ask.count})
                if fail:
                    raise WriteFailed
        except WriteFailed:
            if taken.give_back is not None:
                taken.give_back()
            return taken
    if taken.publish is not None:
        taken.publish()
    return taken


class WriteFailed(Exception):
    pass


def rows(engine, project_id: str) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT count(*) FROM messages WHERE project_id = :p"), {"p": project_id}
        ).scalar_one()


def in_parallel(clients: int, attempts: int, send: Callable[[], bool]) -> int:
    """`attempts` sends spread over `clients` threads started together; how many were let through."""
    allowed: list[bool] = []
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client(share: int) -> None:
        start.wait()
        for _ in range(share):
            answer = send()
            with lock:
                allowed.append(answer)

    shares = [attempts // clients + (1 if n < attempts % clients else 0) for n in range(clients)]
    threads = [threading.Thread(target=client, args=(share,)) for share in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(allowed) == attempts
    return sum(allowed)


def email(project_id: str, limit: int, count: int = 1, zone: str = "UTC") -> Ask:
    return Ask(project_id, messages_of(Channel.EMAIL), limit, zone, count)


def test_a_day_runs_from_one_local_midnight_to_the_next():
    moment = datetime(2031, 3, 10, 14, 59, 59, tzinfo=UTC).timestamp()
    tokyo = quota_day(moment, "Asia/Tokyo")
    assert (tokyo.date, tokyo.start, tokyo.end) == (
        "2031-03-10",
        datetime(2031, 3, 9, 15, tzinfo=UTC),
        datetime(2031, 3, 10, 15, tzinfo=UTC),
    )
    assert quota_day(moment + 1, "Asia/Tokyo").date == "2031-03-11"
    assert quota_day(moment + 1, "UTC").date == "2031-03-10"
    # The clocks go forward in London on 30 March 2031: that day has 23 hours.
    spring = quota_day(datetime(2031, 3, 30, 12, tzinfo=UTC).timestamp(), "Europe/London")
    assert spring.end - spring.start == timedelta(hours=23)


def test_concurrent_takes_let_exactly_the_quota_through(db, engine, quota_project, migrated):
    quota = DailyQuota(redis_for(migrated.redis_url))
    allowed = in_parallel(4, 40, lambda: accept(db, quota, email(quota_project, 25)).allowed)
    assert (allowed, rows(engine, quota_project)) == (25, 25)


def test_a_storage_meter_is_taken_as_exactly_and_apart_from_the_channels(db, quota_project, migrated):
    """Bytes go through the same takes as messages, on counters and locks of their own."""
    quota = DailyQuota(redis_for(migrated.redis_url))
    test_bytes = Ask(quota_project, storage_of(True), 2500, "UTC", 100)
    assert in_parallel(4, 40, lambda: accept(db, quota, test_bytes, write=STORE).allowed) == 25
    assert accept(db, quota, email(quota_project, 1)).allowed
    assert accept(db, quota, Ask(quota_project, storage_of(False), 100, "UTC", 100)).allowed
    assert not accept(db, quota, test_bytes, write=STORE).allowed


def test_a_send_that_does_not_fit_takes_nothing(db, engine, quota_project, migrated):
    quota = DailyQuota(redis_for(migrated.redis_url))
    assert accept(db, quota, email(quota_project, 10, count=7)).used == 7
    refused = accept(db, quota, email(quota_project, 10, count=5))
    assert (refused.allowed, refused.used, refused.remaining, refused.requested) == (False, 7, 3, 5)
    assert accept(db, quota, email(quota_project, 10, count=3)).used == 10
    assert rows(engine, quota_project) == 10


def test_a_rolled_back_send_gives_its_take_back(db, engine, quota_project, migrated):
    quota = DailyQuota(redis_for(migrated.redis_url))
    accept(db, quota, email(quota_project, 3))  # the first take of a day is PostgreSQL's; the rest Redis's
    assert accept(db, quota, email(quota_project, 3, count=2), fail=True).allowed
    assert accept(db, quota, email(quota_project, 3, count=2)).allowed
    assert not accept(db, quota, email(quota_project, 3)).allowed
    assert rows(engine, quota_project) == 3


def test_a_day_ends_at_the_projects_midnight(db, new_project, migrated):
    tokyo_evening = datetime(2031, 3, 10, 14, 59, 59, tzinfo=UTC).timestamp()  # 23:59:59 in Tokyo
    clock = [tokyo_evening]
    quota = DailyQuota(redis_for(migrated.redis_url), clock=lambda: clock[0])
    tokyo, london = new_project(), new_project()
    for project_id, zone in ((tokyo, "Asia/Tokyo"), (london, "Europe/London")):
        sends = [accept(db, quota, email(project_id, 2, zone=zone)).allowed for _ in range(3)]
        assert sends == [True, True, False]
    refused = accept(db, quota, email(tokyo, 2, zone="Asia/Tokyo"))
    assert (refused.reset_seconds, refused.headers()["Retry-After"]) == (1, "1")
    clock[0] += 1  # midnight in Tokyo, three in the afternoon in London
    assert accept(db, quota, email(tokyo, 2, zone="Asia/Tokyo")).allowed
    refused = accept(db, quota, email(london, 2, zone="Europe/London"))
    assert (refused.allowed, refused.reset_seconds) == (False, 9 * 3600)


def test_with_redis_down_postgresql_decides_exactly(db, engine, quota_project, own_redis):
    quota = DailyQuota(redis_for(own_redis.url))
    assert all(accept(db, quota, email(quota_project, 25)).allowed for _ in range(10))
    own_redis.stop(kill=True)
    allowed = in_parallel(4, 30, lambda: accept(db, quota, email(quota_project, 25)).allowed)
    assert (allowed, rows(engine, quota_project)) == (15, 25)
    own_redis.start()  # with nothing in it: the day is counted again, not begun again
    assert not accept(db, quota, email(quota_project, 25)).allowed
    assert rows(engine, quota_project) == 25


def test_redis_back_with_an_old_state_is_counted_again(db, engine, quota_project, own_redis):
    quota = DailyQuota(redis_for(own_redis.url))
    assert all(accept(db, quota, email(quota_project, 12)).allowed for _ in range(5))
    redis_for(own_redis.url).save()  # a snapshot at 5 used, and down it goes
    own_redis.stop(kill=True)
    assert all(accept(db, quota, email(quota_project, 12)).allowed for _ in range(5))
    own_redis.start()  # back with 5, where PostgreSQL has 10
    assert [accept(db, quota, email(quota_project, 12)).allowed for _ in range(3)] == [True, True, False]
    assert rows(engine, quota_project) == 12
