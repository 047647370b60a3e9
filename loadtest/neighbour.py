"""The noisy-neighbour soak: one project's worst beside another's steady transactional sends.

    python loadtest/soak.py --neighbour --duration 5m      # make soak NEIGHBOUR=1

One tenant must never slow another (issue 30). Against the whole stack as processes
(loadtest/workload.py: the API under gunicorn, Celery workers and beat, email through the
real Postmark adapter to the fake provider, paced at --pace a second), a victim project
sends transactional single emails at --victim-rate throughout, while an attacker project
takes its turn at each of the worst things found against shared work, a phase each:

- baseline: the attacker is quiet;
- compile: batches of 16 with a template that parses but never compiles (saved through the
  API where it takes it, else written as a stored version, as an older release left it);
- flood: 20,000 messages marked transactional to the victim's paced provider (with a live
  key: a test key never reaches a provider, so it could not take the victim's pace);
- workflows: triggers whose runs wait until 9999-12-31 and a second more;
- previews: console previews of a 250 KB template, signed in with the test key;
- attachments: 10 MiB attachments, sent in a loop with the test key.

For each phase it prints the victim's accept → sent (the database's own clocks: the
message's creation and its sending) p50 and p99 beside the baseline's and the target
(p99 within 2 x the baseline's + 0.5 s), how many of the victim's messages the provider
received exactly once, what the attacker's requests were answered, and the peak RSS of any
one API or worker process (target: none past 300 MB). The table goes to BENCHMARKS.md
unless --no-record. Every loop is bounded by its phase's time, and everything listens on
127.0.0.1.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import requests
from api_client import Api, Call, Calls
from engagement import Deliveries
from pacer import Pacer
from report import append_section
from sqlalchemy import text
from usage import Role
from workload import RESULTS, Setup, add_setup_arguments, clock, duration, set_up, subscriber_id

from app.config import current_settings
from app.enums import KeyKind
from app.redis_client import redis_for
from app.services import projects, subscribers

PHASES = ("baseline", "compile", "flood", "workflows", "previews", "attachments")
# The template of issue 30 that parses, then makes Python's compiler refuse what Jinja generates.
NEVER_COMPILES = "{{a~a}}" * 5000 + "{% if a %}" * 100 + "x" + "{% endif %}" * 100
BIG_TEMPLATE = "{{ a }} and {{ b }}.\n" * 12_500  # 250 KB
FLOOD = 20_000
BATCH_LIMIT = 10_000
ATTACHMENT_BYTES = 10 * 1024 * 1024
RSS_LIMIT_MB = 300
SETTLE_SECONDS = 120.0  # how long the victim's last messages may take to be sent after the last phase
ATTACKERS = 4  # threads per looping attack
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@dataclass
class Phase:
    name: str
    began: float = 0.0
    ended: float = 0.0
    victim: list[str] = field(default_factory=list)  # the victim's accepted message ids
    answers: Counter[int] = field(default_factory=Counter)  # the attacker's requests, by HTTP status
    rss_mb: dict[str, float] = field(default_factory=dict)  # "api"/"worker" → peak of any one process


class Attacker:
    """The attacking project: a test key, a live key, a few subscribers and its templates."""

    def __init__(self, setup: Setup, api_url: str, calls: Calls):
        db = setup.db
        self.project_id = f"attacker-{os.urandom(4).hex()}"
        projects.create_project(
            db,
            {
                "id": self.project_id,
                "name": "attacker",
                "channels": ["email"],
                "settings": {"daily_quota": {"email": None}},
            },
        )
        self.test_key = projects.create_key(db, self.project_id, "test", KeyKind.TEST)["key"]
        self.live_key = projects.create_key(db, self.project_id, "live", KeyKind.LIVE)["key"]
        rows = [{"external_id": subscriber_id(n), "email": f"a{n}@example.com"} for n in range(100)]
        subscribers.import_many(db, self.project_id, rows)
        self.db = db
        self.api_url = api_url
        self.test = Api(api_url, ATTACKERS * 2, calls, {"Authorization": f"Bearer {self.test_key}"})
        self.live = Api(api_url, ATTACKERS, calls, {"Authorization": f"Bearer {self.live_key}"})
        self.template("plain", "Hello.")

    def close(self) -> None:
        """Close the connections; the project goes with its messages, as the victim's does (workload.set_up)."""
        self.test.close()
        self.live.close()
        if os.environ.get("DATABASE_URL"):  # an embedded database goes with its directory
            projects.delete_project(self.db, redis_for(current_settings().redis_url), self.project_id)

    def template(self, key: str, body: str) -> int:
        """Save a text template through the API; a refused one is written as a stored version."""
        status, _ = self.test.call(
            "attack", "POST", "/v1/templates", {"key": key, "channel": "email", "subject": "x", "text": body}
        )
        if status != 201:
            with self.db() as session:
                session.execute(
                    text(
                        "INSERT INTO templates (project_id, key, version, channel, default_locale, variants) "
                        "VALUES (:project, :key, 1, 'email', 'en', CAST(:variants AS jsonb))"
                    ),
                    {
                        "project": self.project_id,
                        "key": key,
                        "variants": json.dumps({"en": {"subject": "x", "text": body}}),
                    },
                )
                session.commit()
        return status

    def compile_bombs(self, phase: Phase, stop: threading.Event) -> None:
        phase.answers[self.template("never-compiles", NEVER_COMPILES)] += 1
        recipients = [{"email": f"c{n}@example.com", "data": {"a": "y"}} for n in range(16)]
        body = {"channel": "email", "template": "never-compiles", "recipients": recipients}
        loop(stop, lambda: phase.answers.update([self.test.call("attack", "POST", "/v1/messages/batch", body)[0]]))

    def flood(self, phase: Phase, stop: threading.Event) -> None:
        for start in range(0, FLOOD, BATCH_LIMIT):
            recipients = [{"email": f"f{n}@example.com"} for n in range(start, start + BATCH_LIMIT)]
            body = {
                "channel": "email",
                "priority": "transactional",
                "content": {"subject": "Flood", "text": "Transactional, it says."},
                "recipients": recipients,
            }
            phase.answers[self.live.call("attack", "POST", "/v1/messages/batch", body)[0]] += 1

    def overflowing_workflows(self, phase: Phase, stop: threading.Event) -> None:
        steps = [
            {"delay": {"until": "{{ until }}", "offset": "1s"}},
            {"send": {"channel": "email", "template": "plain"}},
        ]
        saved, _ = self.test.call("attack", "PUT", "/v1/workflows/overflow", {"name": "Overflow", "steps": steps})
        phase.answers[saved] += 1
        body = {
            "recipients": [subscriber_id(n) for n in range(100)],
            "data": {"until": "9999-12-31T23:59:59+00:00"},
        }
        loop(
            stop,
            lambda: phase.answers.update([self.test.call("attack", "POST", "/v1/workflows/overflow/trigger", body)[0]]),
        )

    def previews(self, phase: Phase, stop: threading.Event) -> None:
        def preview_loop() -> None:
            browser = requests.Session()
            token = CSRF.search(browser.get(f"{self.api_url}/console/login", timeout=30).text).group(1)
            browser.post(f"{self.api_url}/console/login", data={"key": self.test_key, "csrf_token": token}, timeout=30)
            token = CSRF.search(browser.get(f"{self.api_url}/console/messages", timeout=30).text).group(1)
            body = {"fields": {"text": BIG_TEMPLATE}, "data": {"a": "x", "b": "y"}}

            def one() -> None:
                try:
                    answer = browser.post(
                        f"{self.api_url}/console/templates/plain/preview",
                        json=body,
                        headers={"X-CSRF-Token": token},
                        timeout=60,
                    )
                except requests.ConnectionError:  # a 429 sent before the 250 KB body was read closes it
                    phase.answers[0] += 1
                    return
                phase.answers[answer.status_code] += 1

            loop(stop, one)

        in_threads(ATTACKERS, preview_loop)

    def attachments(self, phase: Phase, stop: threading.Event) -> None:
        content = base64.b64encode(random.Random(30).randbytes(ATTACHMENT_BYTES)).decode()
        body = {
            "channel": "email",
            "to": {"email": "files@example.com"},
            "content": {"subject": "Files", "text": "Attached."},
            "attachments": [{"filename": "big.pdf", "content_type": "application/pdf", "content": content}],
        }
        loop(stop, lambda: phase.answers.update([self.test.call("attack", "POST", "/v1/messages", body)[0]]))


def loop(stop: threading.Event, once: Callable[[], None]) -> None:
    """`once` again and again in ATTACKERS threads until `stop`."""

    def repeat() -> None:
        while not stop.is_set():
            once()

    in_threads(ATTACKERS, repeat)


def in_threads(count: int, target: Callable[[], None]) -> None:
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


class Neighbours:
    """The run: the victim's steady sends, the attacker's phases, and the processes' memory."""

    def __init__(self, args: argparse.Namespace, setup: Setup):
        self.args = args
        self.setup = setup
        self.calls = Calls()
        self.victim = Api(
            setup.stack.api_url, args.clients, self.calls, {"Authorization": f"Bearer {setup.workload.key}"}
        )
        self.attacker = Attacker(setup, setup.stack.api_url, self.calls)
        self.pacer = Pacer(args.clients)
        self.random = random.Random(args.seed)
        self.phase = Phase("setup")
        self.roles = {name: Role(process.pid) for name, process in setup.stack.processes.items()}

    def send_one(self) -> None:
        n = self.random.randrange(self.setup.workload.subscribers)
        phase = self.phase
        status, data = self.victim.call(
            "victim",
            "POST",
            "/v1/messages",
            {"channel": "email", "to": {"subscriber_id": subscriber_id(n)}, "template": "notice-1", "data": {"ref": n}},
        )
        if status == 202:
            phase.victim.append(json.loads(data)["id"])

    def watch_memory(self, stop: threading.Event) -> None:
        """The current phase's peak RSS of any one API or worker process, every second."""
        while not stop.wait(1.0):
            phase = self.phase
            for name, role in self.roles.items():
                kind = "api" if name == "api" else "worker" if name.startswith("worker") else None
                if kind is None:
                    continue
                for process in role.processes():
                    try:
                        mb = process.memory_info().rss / 1e6
                    except Exception:  # gone between the listing and the reading
                        continue
                    phase.rss_mb[kind] = max(phase.rss_mb.get(kind, 0.0), mb)

    def run(self) -> list[Phase]:
        attacks: dict[str, Callable[[Phase, threading.Event], None] | None] = {
            "baseline": None,
            "compile": self.attacker.compile_bombs,
            "flood": self.attacker.flood,
            "workflows": self.attacker.overflowing_workflows,
            "previews": self.attacker.previews,
            "attachments": self.attacker.attachments,
        }
        seconds = self.args.duration / len(self.args.phases)
        phases = []
        stop_watching = threading.Event()
        watcher = threading.Thread(target=self.watch_memory, args=(stop_watching,))
        watcher.start()
        try:
            for name in self.args.phases:
                self.phase = phase = Phase(name, began=time.time())
                print(f"phase {name} for {clock(seconds)} (load average {load_average()}) …", flush=True)
                stop = threading.Event()
                attack = attacks[name]
                attacker = threading.Thread(target=attack, args=(phase, stop)) if attack else None
                if attacker is not None:
                    attacker.start()
                self.pacer.run(self.args.victim_rate, seconds, self.send_one, threading.Event())
                self.pacer.wait_idle()
                stop.set()
                if attacker is not None:
                    attacker.join()
                phase.ended = time.time()
                phases.append(phase)
        finally:
            stop_watching.set()
            watcher.join()
            self.pacer.close()
            self.attacker.close()
            self.victim.close()
        return phases


def sent_after(setup: Setup, ids: list[str]) -> dict[str, float]:
    """Seconds from each victim message's creation to its sending, for those sent."""
    with setup.db() as session:
        rows = session.execute(
            text(
                """
                SELECT id::text, EXTRACT(EPOCH FROM sent_at - created_at) FROM messages
                WHERE id = ANY(CAST(:ids AS uuid[])) AND sent_at IS NOT NULL
                """
            ),
            {"ids": ids},
        ).all()
    return {message_id: float(seconds) for message_id, seconds in rows}


def timeline(setup: Setup, phase: Phase, sent: dict[str, float], calls: list[Call], count: int = 3) -> str:
    """The victim's API answer p99 in the phase, and its `count` slowest messages, each as
    seconds after its creation to being prepared, claimed and sent, with its attempts: where
    a missed p99 waited."""
    answered = [call.seconds for call in calls if phase.began <= call.at < phase.ended]
    slowest = sorted((i for i in phase.victim if i in sent), key=sent.__getitem__)[-count:]
    with setup.db() as session:
        rows = session.execute(
            text(
                """
                SELECT EXTRACT(EPOCH FROM ready_at - created_at), EXTRACT(EPOCH FROM claimed_at - created_at),
                       EXTRACT(EPOCH FROM sent_at - created_at), attempts
                FROM messages WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY sent_at - created_at
                """
            ),
            {"ids": slowest},
        ).all()
    shown = [
        " → ".join(
            f"{step} {float(at):.2f}"
            for step, at in zip(("ready", "claimed", "sent"), row[:3], strict=True)
            if at is not None
        )
        + f" ({row[3]} attempts)"
        for row in rows
    ]
    return f"- {phase.name}: answered at p99 {percentile(answered, 99):.2f} s; " + "; ".join(shown)


def wait_for_victim(setup: Setup, ids: list[str]) -> dict[str, float]:
    """The victim's send times once all are sent, or what was sent when SETTLE_SECONDS ran out."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        found = sent_after(setup, ids)
        if len(found) == len(ids) or time.monotonic() > deadline:
            return found
        time.sleep(1.0)


def percentile(values: list[float], point: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(point / 100 * len(ordered)))] if ordered else float("nan")


def table(phases: list[Phase], sent: dict[str, float], received: Counter[str]) -> tuple[list[str], bool]:
    """The Markdown table of the run, and whether every phase met its targets."""
    base = [sent[i] for i in phases[0].victim if i in sent]
    ceiling = 2 * percentile(base, 99) + 0.5
    lines = [
        "| phase | victim sent / accepted | received once | p50 s | p99 s | p99 target s | API RSS MB | "
        "worker RSS MB | attacker's answers | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    held = True
    for phase in phases:
        times = [sent[i] for i in phase.victim if i in sent]
        once = sum(1 for i in phase.victim if received[i] == 1)
        rss = max(phase.rss_mb.values(), default=0.0)
        ok = (
            len(times) == len(phase.victim)
            and once == len(phase.victim)
            and percentile(times, 99) <= ceiling
            and rss <= RSS_LIMIT_MB
        )
        held = held and ok
        answers = ", ".join(f"{n} x {status}" for status, n in sorted(phase.answers.items())) or "none"
        lines.append(
            f"| {phase.name} | {len(times)} / {len(phase.victim)} | {once} | {percentile(times, 50):.2f} | "
            f"{percentile(times, 99):.2f} | {ceiling:.2f} | {phase.rss_mb.get('api', 0):.0f} | "
            f"{phase.rss_mb.get('worker', 0):.0f} | {answers} | {'held' if ok else 'MISSED'} |"
        )
    return lines, held


def load_average() -> str:
    return " ".join(f"{n:.2f}" for n in os.getloadavg())


def phase_names(value: str) -> tuple[str, ...]:
    """The baseline, then the named phases in their usual order: one attack measured alone."""
    names = {name.strip() for name in value.split(",") if name.strip()}
    if unknown := names - set(PHASES):
        raise argparse.ArgumentTypeError(f"no phase {', '.join(sorted(unknown))}; the phases are {', '.join(PHASES)}")
    return tuple(name for name in PHASES if name == "baseline" or name in names)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=duration, default=300, help="all the phases together (default 5m)")
    parser.add_argument(
        "--phases",
        type=phase_names,
        default=PHASES,
        help=f"the attacker's phases to run, comma-separated, after the baseline (default all: {','.join(PHASES[1:])})",
    )
    parser.add_argument("--victim-rate", type=float, default=5, help="the victim's sends a second (default 5)")
    parser.add_argument("--pace", type=float, default=200, help="the provider's pace a second (default 200)")
    parser.add_argument("--clients", type=int, default=16, help="the victim's sender threads (default 16)")
    add_setup_arguments(parser)
    # A 503 puts a message on the retry ladder (30 s first): the victim's p99 would measure the ladder.
    # The layout `make run` and docker/compose.yaml ship: a worker on the transactional lanes alone.
    parser.set_defaults(subscribers=1000, transient_rate=0.0, results=RESULTS, transactional_worker=True)
    args = parser.parse_args(argv)
    if not 0 < args.victim_rate <= 100 or args.pace <= 0:
        parser.error("the victim's rate must be between 0 and 100 a second, the pace positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    run_dir = args.results / f"neighbour-{datetime.now():%Y%m%d-%H%M%S}"
    started = f"load average at the start {load_average()}"
    print(started, flush=True)
    with set_up("neighbour", args, run_dir, POSTMARK_RATE_PER_SEC=str(args.pace)) as setup:
        neighbours = Neighbours(args, setup)
        phases = neighbours.run()
        ids = [i for phase in phases for i in phase.victim]
        sent = wait_for_victim(setup, ids)
        deliveries = Deliveries(setup.provider_url, lambda key, at: None)
        deliveries.poll()
        slowest = [timeline(setup, phase, sent, neighbours.calls.by_kind["victim"]) for phase in phases]
    lines, held = table(phases, sent, deliveries.counts)
    summary = [
        f"noisy neighbour: {clock(args.duration)} in {len(args.phases)} phases, victim {args.victim_rate:g} "
        f"transactional emails/s, provider paced at {args.pace:g}/s; {started}, at the end {load_average()}",
        f"targets: every victim message sent and received once, p99 ≤ 2 x baseline p99 + 0.5 s, "
        f"no API or worker process past {RSS_LIMIT_MB} MB: {'held' if held else 'MISSED'}",
    ]
    print("\n".join([*summary, "", *lines, "", "where each phase's slowest victim messages waited:", *slowest]))
    if not args.no_record:
        append_section("Noisy neighbour", "\n".join(f"- {line}" for line in summary) + "\n\n" + "\n".join(lines))
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
