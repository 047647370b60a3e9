"""Single sends share prepare tasks: many concurrent sends cost few tasks, a lone one waits for
nothing, and what is waiting is published on a flush. Counted at the real worker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import NamedTuple

import pytest
import requests
from celery.signals import task_prerun
from prometheus_client.parser import text_string_to_metric_families

from app.delivery.coalescer import Coalescer
from app.observability.logs import TASK_HEADER
from tests.conftest import bearer, email
from tests.faults.stack import insert_accepted, new_project, statuses, wait_until_terminal

pytestmark = pytest.mark.usefixtures("worker")

SENDS = 200
CLIENTS = 8
# Well past anything a test waits: a message published sooner was not held by the linger.
LONG_LINGER = 60.0


class Started(NamedTuple):
    task: str
    queue: str
    request_id: str | list[str] | None


# The tokens that take ids in turn per project (app/delivery/fairness.py).
PREPARE, DELIVER = "tidings.prepare_next", "tidings.deliver_next"


@contextmanager
def tasks_run() -> Iterator[list[Started]]:
    """Every prepare and deliver token the session worker starts meanwhile."""
    started: list[Started] = []

    def record(sender, **_: object) -> None:
        if sender.name in (PREPARE, DELIVER):
            request = sender.request
            queue, request_id = request.delivery_info["routing_key"], getattr(request, TASK_HEADER, None)
            started.append(Started(sender.name, queue, request_id))

    task_prerun.connect(record, weak=False)
    try:
        yield started
    finally:
        task_prerun.disconnect(record)


def carrying(started: list[Started], task: str, tag: str) -> list[Started]:
    """The `task` tokens that carried sends of requests whose ids start with `tag`: tokens of
    other tests' leftovers may run meanwhile, and a token carries no ids to tell them apart."""

    def requests(one: Started) -> list[str]:
        return [one.request_id] if isinstance(one.request_id, str) else list(one.request_id or [])

    return [one for one in started if one.task == task and any(r.startswith(tag) for r in requests(one))]


def coalesced(client) -> dict[str, float]:
    body = client.get("/metrics").get_data(as_text=True)
    families = {family.name: family for family in text_string_to_metric_families(body)}
    return {
        name: sum(s.value for s in families[f"tidings_{name}"].samples if s.labels.get("priority") == "transactional")
        for name in ("coalesced_tasks", "coalesced_messages")
    }


def test_concurrent_sends_share_prepare_tasks_and_all_arrive(client, live_api, project, engine, fake_provider):
    before = coalesced(client)

    linger = client.application.extensions["tidings"].settings.prepare_linger
    tag = uuid.uuid4().hex

    def send_many(sender: int) -> list[str]:
        with requests.Session() as http:
            answers = [
                http.post(
                    f"{live_api}/v1/messages",
                    json=email(),
                    headers={**bearer(project.live_key), "X-Request-ID": f"{tag}-{sender}-{n}"},
                    timeout=30,
                )
                for n in range(SENDS // CLIENTS)
            ]
        return [answer.json()["id"] for answer in answers]

    with tasks_run() as started, ThreadPoolExecutor(CLIENTS) as pool:
        began = time.monotonic()
        ids = [i for chunk in pool.map(send_many, range(CLIENTS)) for i in chunk]
        elapsed = time.monotonic() - began
        seen = wait_until_terminal(engine, ids, timeout=60)
    assert len(set(ids)) == SENDS
    assert set(seen.values()) == {"sent"}
    assert all(fake_provider.count(i) == 1 for i in ids)
    prepares, delivers = carrying(started, PREPARE, tag), carrying(started, DELIVER, tag)
    # One publish at once, then at most one per linger while the burst lasts, and one after it.
    assert len(prepares) <= elapsed / linger + 2
    # A token per provider batch of what each prepare readied: at most one short one each.
    assert len(delivers) <= SENDS / 100 + len(prepares)
    grew = {name: value - before[name] for name, value in coalesced(client).items()}
    assert grew == {"coalesced_tasks": len(prepares), "coalesced_messages": SENDS}
    print(f"\n{SENDS} sends in {elapsed:.2f} s: {len(prepares)} prepare and {len(delivers)} deliver tasks")


def test_a_lone_send_goes_at_once_and_a_flush_publishes_what_waits(client, engine):
    project = new_project(engine)
    first, second = insert_accepted(engine, project, 2, priority="transactional")
    coalescer = Coalescer(linger=LONG_LINGER)
    # Nothing was published during the last linger, so the first id does not wait for company.
    start_the_linger(coalescer, engine, first, project)
    coalescer.add([second], "transactional", project=project)
    time.sleep(0.5)
    assert statuses(engine, [second]) == {second: "accepted"}  # held for the linger
    coalescer.flush()
    assert wait_until_terminal(engine, [second], timeout=20) == {second: "sent"}


def start_the_linger(coalescer: Coalescer, engine, message_id: str, project: str) -> None:
    """Publish one id, which goes at once on a quiet coalescer; the next ones wait a linger."""
    coalescer.add([message_id], "transactional", project=project)
    assert wait_until_terminal(engine, [message_id], timeout=20) == {message_id: "sent"}


def test_a_full_buffer_is_published_without_waiting_for_the_linger(client, engine):
    project = new_project(engine)
    first, *ids = insert_accepted(engine, project, 6, priority="transactional")
    coalescer = Coalescer(linger=LONG_LINGER, limit=5)
    start_the_linger(coalescer, engine, first, project)
    tag = uuid.uuid4().hex
    with tasks_run() as started:
        coalescer.add(ids[:2], "transactional", tag, project=project)
        coalescer.add(ids[2:], "transactional", tag, project=project)
        assert set(wait_until_terminal(engine, ids, timeout=20).values()) == {"sent"}
    assert [task.queue for task in carrying(started, PREPARE, tag)] == ["prepare.transactional"]


def test_ids_of_each_priority_go_to_their_own_lane(client, engine):
    project = new_project(engine)
    first, *urgent = insert_accepted(engine, project, 3, priority="transactional")
    bulk = insert_accepted(engine, project, 2, priority="bulk")
    coalescer = Coalescer(linger=LONG_LINGER)
    start_the_linger(coalescer, engine, first, project)
    tag = uuid.uuid4().hex
    with tasks_run() as started:
        coalescer.add(urgent[:1], "transactional", tag, project=project)
        coalescer.add(bulk, "bulk", tag, project=project)
        coalescer.add(urgent[1:], "transactional", tag, project=project)
        coalescer.flush()
        assert set(wait_until_terminal(engine, urgent + bulk, timeout=20).values()) == {"sent"}
    queues = sorted(task.queue for task in carrying(started, PREPARE, tag))
    assert queues == ["prepare.bulk", "prepare.transactional"]


def test_adding_from_many_threads_loses_no_id(client, engine):
    project = new_project(engine)
    ids = insert_accepted(engine, project, 64, priority="transactional")
    coalescer = Coalescer(linger=0.005)
    threads = [
        threading.Thread(
            target=lambda part=ids[i::8]: [coalescer.add([one], "transactional", project=project) for one in part]
        )
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(wait_until_terminal(engine, ids, timeout=30).values()) == {"sent"}


def test_a_task_carries_the_request_ids_of_the_sends_it_holds(client, engine):
    project = new_project(engine)
    first, *ids = insert_accepted(engine, project, 4, priority="transactional")
    coalescer = Coalescer(linger=LONG_LINGER)
    start_the_linger(coalescer, engine, first, project)
    tag = uuid.uuid4().hex
    with tasks_run() as started:
        coalescer.add(ids[:1], "transactional", f"{tag}-b", project=project)
        coalescer.add(ids[1:2], "transactional", f"{tag}-a", project=project)
        coalescer.add(ids[2:], "transactional", None, project=project)  # the CLI sends with no request
        coalescer.flush()
        assert set(wait_until_terminal(engine, ids, timeout=20).values()) == {"sent"}
    (prepare,) = carrying(started, PREPARE, tag)
    (deliver,) = carrying(started, DELIVER, tag)
    # Logs of both tokens carry both requests: a grep for either finds them.
    assert prepare.request_id == deliver.request_id == [f"{tag}-a", f"{tag}-b"]


def test_a_command_that_exits_right_after_sending_publishes_on_its_way_out(migrated, project):
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    done = subprocess.run(
        [sys.executable, "-m", "app.runtime.cli", "send", "--project", project.id, "--to", "ada@example.com"],
        env={**environ, **migrated.environ, "PREPARE_LINGER_MS": "10000"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    message_id = re.search(r"accepted (\S+)", done.stdout).group(1)
    # No beat runs here: only the task the command published can move the message.
    assert project.wait_for(message_id)["status"] == "sent"
