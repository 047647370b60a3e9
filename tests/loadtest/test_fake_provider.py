"""The standalone fake provider server, run as its command line, driven through our adapters."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from providers.base import Outbound, Outcome, RateLimited, TransientError
from providers.fake import FakeProvider
from providers.postmark import PostmarkProvider
from providers.resend import ResendProvider
from providers.sendgrid import SendGridProvider
from providers.twilio import TwilioProvider
from tests.providers.helpers import emails

SCRIPT = Path(__file__).resolve().parents[2] / "loadtest" / "fake_provider.py"

Start = Callable[..., str]


@pytest.fixture
def start() -> Iterator[Start]:
    """Start `python loadtest/fake_provider.py --port 0 ARGS…`; returns its URL."""
    processes: list[subprocess.Popen] = []

    def run(*args: str) -> str:
        process = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--port", "0", *args], stdout=subprocess.PIPE, text=True
        )
        processes.append(process)
        line = process.stdout.readline()
        assert line.startswith("fake provider listening on http://127.0.0.1:"), line
        return line.rsplit(" ", 1)[1].strip()

    yield run
    for process in processes:
        process.terminate()
        process.wait(10)


def ledger(url: str) -> dict:
    return requests.get(f"{url}/ledger", timeout=5).json()


def test_the_fake_adapter_gets_an_answer_per_message_and_the_ledger_counts_them(start):
    url = start("--latency", "5-10", "--permanent-rate", "0.2", "--seed", "7")
    adapter = FakeProvider.from_env({"FAKE_PROVIDER_URL": url})
    batch = emails(300)
    results = [r for i in range(0, 300, FakeProvider.max_batch) for r in adapter.send(batch[i : i + 100])]
    sent = {r.message_id for r in results if r.outcome is Outcome.SENT}
    rejected = [r for r in results if r.outcome is Outcome.PERMANENT]
    assert len(sent) + len(rejected) == 300
    assert 30 <= len(rejected) <= 90  # about 20%
    book = ledger(url)
    assert (book["accepted"], book["rejected"], book["duplicates"]) == (len(sent), len(rejected), 0)
    assert set(book["messages"]) == sent
    assert book["statuses"] == {"200": 3}


def test_latency_is_drawn_from_the_range(start):
    url = start("--latency", "120-150")
    adapter = FakeProvider.from_env({"FAKE_PROVIDER_URL": url})
    adapter.send(emails(1))  # open the connection first
    began = time.monotonic()
    adapter.send(emails(1))
    assert 0.12 <= time.monotonic() - began < 2.0


def test_transient_failures_come_at_roughly_the_rate(start):
    url = start("--latency", "0-1", "--transient-rate", "0.5", "--seed", "3")
    adapter = FakeProvider.from_env({"FAKE_PROVIDER_URL": url})
    failures = 0
    for message in emails(60):
        try:
            adapter.send([message])
        except TransientError:
            failures += 1
    assert 15 <= failures <= 45
    assert ledger(url)["statuses"]["503"] == failures


def test_a_429_burst_says_how_long_to_wait(start):
    url = start("--latency", "0-1", "--burst-rate", "1", "--burst-seconds", "3")
    adapter = FakeProvider.from_env({"FAKE_PROVIDER_URL": url})
    with pytest.raises(RateLimited) as raised:
        adapter.send(emails(2))
    assert 1 <= raised.value.retry_after <= 3
    assert ledger(url)["accepted"] == 0


def test_reset_empties_the_ledger(start):
    url = start("--latency", "0-1")
    FakeProvider.from_env({"FAKE_PROVIDER_URL": url}).send(emails(3))
    assert ledger(url)["accepted"] == 3
    assert requests.post(f"{url}/reset", timeout=5).status_code == 204
    assert ledger(url) == {
        "requests": 0,
        "accepted": 0,
        "rejected": 0,
        "duplicates": 0,
        "statuses": {},
        "messages": {},
    }


def test_the_feed_pages_through_acceptances_in_order_with_their_times(start):
    url = start("--latency", "0-1", "--permanent-rate", "0.3", "--seed", "5")
    adapter = FakeProvider.from_env({"FAKE_PROVIDER_URL": url})
    before = time.time()
    sent = [r.message_id for r in adapter.send(emails(20)) if r.outcome is Outcome.SENT]
    first = requests.get(f"{url}/ledger/feed", params={"after": 0}, timeout=5).json()
    assert first["next"] == len(sent)
    assert [key for _, key in first["entries"]] == sent
    assert all(before <= at <= time.time() for at, _ in first["entries"])
    adapter.send(emails(22)[20:])
    rest = requests.get(f"{url}/ledger/feed", params={"after": first["next"]}, timeout=5).json()
    assert [key for _, key in rest["entries"]] == [m for m in ("m21", "m22") if m in ledger(url)["messages"]]
    assert requests.get(f"{url}/ledger/feed", params={"after": "-1"}, timeout=5).status_code == 400


def test_it_holds_hundreds_of_concurrent_requests(start):
    url = start("--latency", "200-250")
    adapter = FakeProvider.from_env({"FAKE_PROVIDER_URL": url})
    batch = emails(300)
    began = time.monotonic()
    with ThreadPoolExecutor(300) as pool:
        results = list(pool.map(lambda m: adapter.send([m])[0], batch))
    elapsed = time.monotonic() - began
    assert {r.outcome for r in results} == {Outcome.SENT}
    assert ledger(url)["accepted"] == 300
    assert elapsed < 20  # one at a time would take over 60 s


def adapters(url: str) -> dict[str, object]:
    email = {"EMAIL_FROM": "hello@acme.test"}
    return {
        "resend": ResendProvider.from_env({**email, "RESEND_API_KEY": "re_x", "RESEND_BASE_URL": url}),
        "postmark": PostmarkProvider.from_env({**email, "POSTMARK_SERVER_TOKEN": "t", "POSTMARK_BASE_URL": url}),
        "sendgrid": SendGridProvider.from_env({**email, "SENDGRID_API_KEY": "SG.x", "SENDGRID_BASE_URL": url}),
        "twilio": TwilioProvider.from_env(
            {
                "TWILIO_ACCOUNT_SID": "AC1",
                "TWILIO_AUTH_TOKEN": "t",
                "TWILIO_FROM": "+15005550006",
                "TWILIO_BASE_URL": url,
            }
        ),
    }


def sms(n: int) -> Outbound:
    return Outbound(f"s{n}", "sms", f"+1415555{n:04d}", None, "code", None)


@pytest.mark.parametrize("name", ["resend", "postmark", "sendgrid", "twilio"])
def test_it_answers_like_each_provider(start, name):
    url = start("--latency", "0-1")
    adapter = adapters(url)[name]
    batch = [sms(1)] if name == "twilio" else emails(3, text="same", html=None)
    results = adapter.send(batch)
    assert {r.outcome for r in results} == {Outcome.SENT}
    assert all(r.provider_message_id for r in results)
    expected = {"+14155550001"} if name == "twilio" else {"m1", "m2", "m3"}
    assert set(ledger(url)["messages"]) == expected


@pytest.mark.parametrize(
    ("name", "suppress"), [("resend", False), ("postmark", True), ("sendgrid", False), ("twilio", False)]
)
def test_it_rejects_like_each_provider(start, name, suppress):
    url = start("--latency", "0-1", "--permanent-rate", "1")
    batch = [sms(1)] if name == "twilio" else emails(1)
    [result] = adapters(url)[name].send(batch)
    assert (result.outcome, result.suppress) == (Outcome.PERMANENT, suppress)


def test_a_repeated_resend_idempotency_key_is_answered_not_sent_again(start):
    url = start("--latency", "0-1")
    adapter = adapters(url)["resend"]
    first, again = adapter.send(emails(2)), adapter.send(emails(2))
    assert [r.provider_message_id for r in first] == [r.provider_message_id for r in again]
    assert ledger(url)["messages"] == {"m1": 1, "m2": 1}
