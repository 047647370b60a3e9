"""Locust users that behave like a product's backend: 80% single transactional sends, 5%
batch sends of 1,000, 15% reads (a message's status, the delivery log, the digest).

`loadtest/locust_run.py` (`make loadtest`) sets up a project, subscribers and templates,
starts the stack and runs this file headless. To aim it at a stack of your own:

    TIDINGS_API_KEY=tid_live_… TIDINGS_ADMIN_KEY=… TIDINGS_SUBSCRIBERS=100000 \\
    TIDINGS_TEMPLATES=welcome,receipt LOCUST_RATE=100 \\
    locust -f loadtest/locustfile.py --headless -u 50 -r 50 -t 60s --host http://127.0.0.1:8000

LOCUST_RATE is the total of tasks a second, shared by the users (each runs rate / users a
second), so the load is fixed whatever the user count; a batch task sends 1,000 messages,
so the messages a second are about 51 x LOCUST_RATE. Subscribers are u0 … u{N-1}.

Locust only ever runs against 127.0.0.1 or localhost: another host ends it before its
first request.
"""

from __future__ import annotations

import os
import random
from collections import deque
from typing import Any
from urllib.parse import urlsplit

from locust import FastHttpUser, constant_throughput, events, task

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
BATCH_SIZE = 1_000
RECENT = deque(maxlen=1_000)  # ids of messages sent lately, for the status reads


@events.init.add_listener
def refuse_remote_hosts(environment: Any, **_: Any) -> None:
    host = urlsplit(environment.host or Tidings.host).hostname
    if host not in LOOPBACK:
        raise SystemExit(f"locust runs only against 127.0.0.1 or localhost, not {host!r}")


class Tidings(FastHttpUser):
    host = os.environ.get("TIDINGS_API_URL", "http://127.0.0.1:8000")

    def on_start(self) -> None:
        self.key = os.environ["TIDINGS_API_KEY"]
        self.admin_key = os.environ.get("TIDINGS_ADMIN_KEY", "")
        self.subscribers = int(os.environ.get("TIDINGS_SUBSCRIBERS", "100000"))
        self.templates = os.environ.get("TIDINGS_TEMPLATES", "notice-1").split(",")
        users = max(self.environment.parsed_options.num_users or 1, 1)
        self.pace = constant_throughput(float(os.environ.get("LOCUST_RATE", "100")) / users)

    def wait_time(self) -> float:
        return self.pace(self)

    def headers(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.key}"}

    def subscriber(self) -> str:
        return f"u{random.randrange(self.subscribers)}"

    @task(80)
    def send(self) -> None:
        body = {
            "channel": "email",
            "to": {"subscriber_id": self.subscriber()},
            "template": random.choice(self.templates),
            "data": {"ref": f"order A-{random.randrange(10**6)}"},
        }
        with self.client.post("/v1/messages", json=body, headers=self.headers(), catch_response=True) as answer:
            if answer.status_code == 202:
                RECENT.append(answer.json()["id"])
            else:
                answer.failure(f"{answer.status_code}: {answer.text[:200]}")

    @task(5)
    def send_batch(self) -> None:
        body = {
            "channel": "email",
            "template": random.choice(self.templates),
            "data": {"ref": "newsletter"},
            "priority": "bulk",
            "recipients": [
                {"subscriber_id": f"u{n}"}
                for n in random.sample(range(self.subscribers), min(BATCH_SIZE, self.subscribers))
            ],
        }
        with self.client.post("/v1/messages/batch", json=body, headers=self.headers(), catch_response=True) as answer:
            if answer.status_code != 202:
                answer.failure(f"{answer.status_code}: {answer.text[:200]}")

    @task(5)
    def message_status(self) -> None:
        if RECENT:
            self.client.get(f"/v1/messages/{random.choice(RECENT)}", headers=self.headers(), name="/v1/messages/[id]")

    @task(5)
    def delivery_log(self) -> None:
        self.client.get("/v1/events?limit=50", headers=self.headers(), name="/v1/events")

    @task(5)
    def digest(self) -> None:
        self.client.get("/v1/admin/digest", headers=self.headers(self.admin_key))
