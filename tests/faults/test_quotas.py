"""Daily quotas through real API processes: four clients at once on two gunicorn workers get
exactly the quota, with Redis up, with Redis down, and once it is back with nothing in it;
and what was accepted reaches the provider, each message once."""

from __future__ import annotations

import threading
from collections import Counter

import requests
from sqlalchemy import Engine, text

from tests.conftest import ADMIN_KEY
from tests.faults.stack import Stack, assert_ledger_agrees, wait_until_terminal

BODY = {"channel": "email", "to": {"email": "ada@example.com"}, "content": {"subject": "Hi", "text": "t"}}


def quota_project(api: str, email_quota: int) -> tuple[str, str]:
    """A project with `email_quota` emails a day, and a live key for it."""
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    project = requests.post(
        f"{api}/v1/admin/projects",
        json={"name": "Quota", "channels": ["email"], "settings": {"daily_quota": {"email": email_quota}}},
        headers=admin,
        timeout=10,
    ).json()
    key = requests.post(f"{api}/v1/admin/projects/{project['id']}/keys", json={"name": "k"}, headers=admin, timeout=10)
    return project["id"], key.json()["key"]


def send_concurrently(api: str, key: str, clients: int, each: int) -> tuple[Counter, list[str]]:
    """`clients` threads, each with its own connection, sending `each` at once; the status
    codes, and the ids of the messages accepted."""
    codes: Counter = Counter()
    accepted: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(clients)

    def client() -> None:
        with requests.Session() as session:
            session.headers["Authorization"] = f"Bearer {key}"
            start.wait()
            for _ in range(each):
                answer = session.post(f"{api}/v1/messages", json=BODY, timeout=30)
                with lock:
                    codes[answer.status_code] += 1
                    if answer.status_code == 202:
                        accepted.append(answer.json()["id"])

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a client still waits for its answers"
    return codes, accepted


def delivered_once(stack: Stack, engine: Engine, provider, ids: list[str], fault: str, at_injection: dict) -> None:
    """What was accepted goes out, each once, and nothing else of the project does: a worker
    (and beat, for what the API could not publish) drains it, and the ledger is checked."""
    stack.start_beat()
    stack.start_worker()
    seen = wait_until_terminal(engine, ids, timeout=60)
    tally = assert_ledger_agrees(ids, seen, provider)
    tally.report(fault, at_injection)
    assert tally.outcomes == {"sent": len(ids)}


def rows(engine: Engine, project_id: str) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT count(*) FROM messages WHERE project_id = :p"), {"p": project_id}
        ).scalar_one()


def test_four_clients_on_two_api_processes_get_exactly_the_quota(make_stack, provider, engine):
    stack = make_stack()
    api = stack.start_api(workers=2)
    project_id, key = quota_project(api, 60)
    codes, ids = send_concurrently(api, key, clients=4, each=20)
    assert codes == Counter({202: 60, 429: 20})
    assert rows(engine, project_id) == 60
    delivered_once(stack, engine, provider, ids, "quota of 60, four clients", {"answered": dict(codes)})


def test_with_redis_down_and_back_empty_the_quota_stays_exact(make_stack, provider, engine):
    stack = make_stack()
    api = stack.start_api(workers=2)
    project_id, key = quota_project(api, 30)
    codes, before = send_concurrently(api, key, clients=2, each=5)
    assert codes == Counter({202: 10})
    stack.redis.stop(kill=True)
    codes, during = send_concurrently(api, key, clients=4, each=10)
    assert codes == Counter({202: 20, 429: 20})
    assert rows(engine, project_id) == 30
    stack.wait_for_log("api", f"daily quota of {project_id} falls back to PostgreSQL", timeout=5)
    stack.redis.start()  # nothing in it: the day must be counted again, not begun again
    codes, after = send_concurrently(api, key, clients=4, each=2)
    assert (codes, after) == (Counter({429: 8}), [])
    assert rows(engine, project_id) == 30
    at_loss = {"accepted before": len(before), "accepted while Redis was down": len(during)}
    delivered_once(stack, engine, provider, before + during, "quota of 30 across a Redis loss", at_loss)
