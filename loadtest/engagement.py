"""Deliveries as the provider saw them, and the opens and clicks recipients answer with.

`Deliveries` follows the fake provider's feed: when each message first reached it and how
often it did (twice means a duplicate send). `Engagement` answers a share of deliveries
with a Postmark `Open` webhook some seconds later, and a share of those with a `Click`,
through the real inbound route (Basic auth, as Postmark calls it).
"""

from __future__ import annotations

import base64
import heapq
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import requests
from api_client import Api

FEED_EVERY = 0.5  # seconds between polls of the provider's feed
ENGAGEMENT_THREADS = 8


class Deliveries:
    def __init__(self, provider_url: str, on_new: Callable[[str, float], None]):
        self.provider_url = provider_url
        self.on_new = on_new
        self.first: dict[str, float] = {}  # message id → when the provider first accepted it
        self.counts: Counter[str] = Counter()
        self.position = 0
        self.session = requests.Session()
        self.lock = threading.Lock()  # the follower thread and the soak's own catch-ups poll

    def poll(self) -> None:
        """Read the feed up to its end."""
        with self.lock:
            while True:
                page = self.session.get(
                    f"{self.provider_url}/ledger/feed", params={"after": self.position}, timeout=30
                ).json()
                for at, key in page["entries"]:
                    self.counts[key] += 1
                    if key not in self.first:
                        self.first[key] = at
                        self.on_new(key, at)
                if page["next"] == self.position:
                    return
                self.position = page["next"]

    def follow(self, stop: threading.Event) -> None:
        while not stop.wait(FEED_EVERY):
            self.poll()

    def calls(self) -> dict[str, int]:
        """The provider's answers so far, by HTTP status."""
        return self.session.get(f"{self.provider_url}/ledger", timeout=60).json()["statuses"]

    def duplicates(self) -> int:
        return sum(1 for count in self.counts.values() if count > 1)


class Engagement:
    def __init__(
        self, api: Api, webhook_auth: tuple[str, str], delay: float, open_share: float, click_share: float, seed: int
    ):
        self.api = api
        token = base64.b64encode(":".join(webhook_auth).encode()).decode()
        self.headers = {"Authorization": f"Basic {token}"}
        self.delay = delay
        self.open_share, self.click_share = open_share, click_share
        self.random = random.Random(seed)
        self.due: list[tuple[float, str, str]] = []  # (wall time, Postmark record type, message id)
        self.lock = threading.Lock()
        self.posted: Counter[tuple[str, int]] = Counter()  # (record type, HTTP status) → count

    def delivered(self, message_id: str, at: float) -> None:
        """Called for each first delivery: maybe an open `delay` later, maybe a click a second after it."""
        with self.lock:
            if self.random.random() >= self.open_share:
                return
            heapq.heappush(self.due, (at + self.delay, "Open", message_id))
            if self.random.random() < self.click_share:
                heapq.heappush(self.due, (at + self.delay + 1, "Click", message_id))

    def run(self, stop: threading.Event) -> None:
        """Post each record at its time until `stop`; records not yet due then are dropped."""
        with ThreadPoolExecutor(ENGAGEMENT_THREADS, thread_name_prefix="engagement") as pool:
            while not stop.is_set():
                with self.lock:
                    ready = []
                    while self.due and self.due[0][0] <= time.time():
                        ready.append(heapq.heappop(self.due))
                for _, record_type, message_id in ready:
                    pool.submit(self.post, record_type, message_id)
                stop.wait(0.05)

    def post(self, record_type: str, message_id: str) -> None:
        record = {
            "RecordType": record_type,
            "MessageStream": "outbound",
            "Metadata": {"tidings_message_id": message_id},
            "ReceivedAt": datetime.now(UTC).isoformat(),
            **({"FirstOpen": True} if record_type == "Open" else {"OriginalLink": "https://example.com/offer"}),
        }
        status, _ = self.api.call("inbound", "POST", "/v1/inbound/postmark", record, headers=self.headers)
        with self.lock:
            self.posted[(record_type, status)] += 1
