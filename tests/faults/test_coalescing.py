"""The coalescer in a real gunicorn API: tasks counted on the broker with no worker running.

A burst of single sends becomes a few prepare tasks; a graceful stop publishes the ids still
waiting for their linger, so they arrive with no sweeper running.
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from tasks.backlog import queue_depths
from tests.conftest import bearer, email
from tests.faults.stack import Stack, api_project, assert_ledger_agrees, coalesced, wait_until_terminal
from tests.waiting import wait_until

LANE = "prepare.transactional"
SENDS = 200
CLIENTS = 8


def send(api: str, key: str, http: requests.Session | None = None) -> str:
    answer = (http or requests).post(f"{api}/v1/messages", json=email(), headers=bearer(key), timeout=30)
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def wait_for_published(api: str, messages: int, timeout: float = 30) -> tuple[float, float]:
    """The coalescer's (tasks, messages) published once `messages` have been."""
    return wait_until(lambda: coalesced(api), lambda counts: counts[1] >= messages, timeout, f"{messages} published")


def queued(stack: Stack) -> int:
    return queue_depths(stack.redis.url, [LANE])[LANE]


def test_a_burst_of_sends_is_a_few_prepare_tasks(make_stack, provider, engine):
    # Long enough that the burst's speed, whatever the machine's load, hardly matters.
    linger = 2.0
    stack = make_stack(PREPARE_LINGER_MS=str(int(linger * 1000)))
    api = stack.start_api()
    key = api_project(api, "Coalescing").key

    def send_many(_: int) -> list[str]:
        with requests.Session() as http:
            return [send(api, key, http) for _ in range(SENDS // CLIENTS)]

    began = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        ids = [i for chunk in pool.map(send_many, range(CLIENTS)) for i in chunk]
    elapsed = time.monotonic() - began
    tasks, messages = wait_for_published(api, SENDS)
    assert messages == SENDS
    assert queued(stack) == tasks  # no worker yet: every task published is still on the broker
    # The first send goes at once, then at most one publish per linger.
    assert tasks <= elapsed / linger + 2
    assert tasks <= SENDS / 10
    stack.start_worker()
    seen = wait_until_terminal(engine, ids, timeout=60)
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report("a burst of single sends", {"sends": SENDS, "prepare tasks": int(tasks), "worker": "none yet"})
    assert tally.outcomes == {"sent": SENDS}


def test_a_graceful_stop_publishes_the_ids_still_waiting(make_stack, provider, engine):
    stack = make_stack(PREPARE_LINGER_MS="10000")
    api = stack.start_api()
    key = api_project(api, "Coalescing").key
    first = send(api, key)
    assert wait_for_published(api, 1) == (1, 1)  # alone on a quiet coalescer: published at once
    waiting = [send(api, key), send(api, key)]
    time.sleep(0.5)
    assert coalesced(api) == (1, 1)  # the others wait for the linger
    assert queued(stack) == 1
    assert stack.signal("api", signal.SIGTERM) == 0
    assert queued(stack) == 2  # one more task, published on the way out
    stack.start_worker()  # and no beat: nothing but those tasks can move the messages
    ids = [first, *waiting]
    seen = wait_until_terminal(engine, ids, timeout=60)
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report("the API stopped with sends in its linger", {"published": 1, "lingering": len(waiting)})
    assert tally.outcomes == {"sent": len(ids)}
