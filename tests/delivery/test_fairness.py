"""Work in turn per project: a campaign of 100,000 does not hold another project's 200 behind it,
nor a flood of 4,000 "transactional" messages another project's single sends, neither in prepare
nor in a provider's deliver lane where the provider's pace is the limit; a project alone still
gets the whole lane."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest
import redis
from celery.worker import state
from sqlalchemy import text

from app.config import current_settings
from app.delivery import dispatch, fairness, pacing
from app.delivery.broker import celery_app
from app.delivery.pacing import SLICES
from app.delivery.queues import deliver_queue, prepare_queue
from tasks.celery_app import configure
from tasks.deliver import deliver_next, paced_turn
from tests.conftest import bearer, create_project, email
from tests.faults.stack import insert_accepted, new_project, ready_messages
from tests.waiting import wait_until

LANE = "prepare.test-fairness"


@pytest.fixture
def ring(settings):
    client = redis.Redis.from_url(settings.redis_url)
    client.delete(*client.keys(f"{fairness.PREFIX}{LANE}:*") or ["-"])
    yield client
    client.delete(*client.keys(f"{fairness.PREFIX}{LANE}:*") or ["-"])


def chunks_of(ring, lane: str = LANE, size: int = 1) -> list[tuple[str, list[str]] | None]:
    """Every withdrawal of `size` ids until the lane is empty, the last one (None) included."""
    taken: list[tuple[str, list[str]] | None] = []
    while withdrawn := fairness.withdraw(ring, lane, size):
        taken.extend(withdrawn)
        assert len(taken) <= 100, "a withdrawal repeated a chunk"
    return [*taken, None]


def test_projects_take_turns_and_each_keeps_its_own_order(ring):
    fairness.deposit(ring, LANE, [("a", ["a1"]), ("a", ["a2"]), ("a", ["a3"]), ("a", ["a4"])])
    fairness.deposit(ring, LANE, [("b", ["b1"]), ("b", ["b2"]), ("c", ["c1"])])
    taken = chunks_of(ring)
    assert [chunk for _, chunk in taken[:-1]] == [["a1"], ["b1"], ["c1"], ["a2"], ["b2"], ["a3"], ["a4"]]
    assert [project for project, _ in taken[:-1]] == ["a", "b", "c", "a", "b", "a", "a"]
    assert ring.keys(f"{fairness.PREFIX}{LANE}:*") == []


def test_a_project_that_comes_back_rejoins_at_the_end(ring):
    fairness.deposit(ring, LANE, [("a", ["a1"]), ("a", ["a2"])])
    assert fairness.withdraw(ring, LANE, 1) == [("a", ["a1"])]
    fairness.deposit(ring, LANE, [("b", ["b1"])])
    fairness.deposit(ring, LANE, [("a", ["a3"])])
    assert chunks_of(ring) == [("a", ["a2"]), ("b", ["b1"]), ("a", ["a3"]), None]


def test_a_chunk_given_back_goes_first_of_its_project_but_after_the_others_turn(ring):
    fairness.deposit(ring, LANE, [("a", ["a1"]), ("a", ["a2"]), ("b", ["b1"])])
    assert fairness.withdraw(ring, LANE, 1) == [("a", ["a1"])]
    fairness.give_back(ring, LANE, [("a", ["a1"])])  # the provider's pace admitted none of it
    assert fairness.withdraw(ring, LANE, 1) == [("b", ["b1"])]
    fairness.give_back(ring, LANE, [("b", ["b1"])])  # b had no other chunk: it rejoins the ring
    assert chunks_of(ring) == [("a", ["a1"]), ("b", ["b1"]), ("a", ["a2"]), None]


def test_a_token_takes_an_equal_share_of_each_project_in_turn_until_it_is_full(ring):
    fairness.deposit(ring, LANE, [("a", ["a1", "a2", "a3", "a4"]), ("a", ["a5", "a6", "a7", "a8"])])
    fairness.deposit(ring, LANE, [("b", ["b1"]), ("c", ["c1", "c2"])])
    # a's chunk does not fit its share (2 of 6): the part that fits goes, the rest stays first
    # of a's; b has fewer than its share, and c and then a share what b left.
    assert fairness.withdraw(ring, LANE, 6) == [("a", ["a1", "a2"]), ("b", ["b1"]), ("c", ["c1", "c2"]), ("a", ["a3"])]
    assert fairness.withdraw(ring, LANE, 6) == [("a", ["a4", "a5", "a6", "a7", "a8"])]
    assert fairness.withdraw(ring, LANE, 6) == []
    assert ring.keys(f"{fairness.PREFIX}{LANE}:*") == []


def test_a_projects_single_sends_get_as_many_ids_of_a_token_as_a_floods_chunks(ring):
    """Single sends are a chunk of one id each: a token takes as many of them as of a flood's
    500-id chunks, not one a token, which kept them behind the flood as long as first in,
    first out would have."""
    flood = [f"a{n}" for n in range(1_000)]
    fairness.deposit(ring, LANE, [("a", flood[:500]), ("a", flood[500:])])
    for n in range(5):
        fairness.deposit(ring, LANE, [("b", [f"b{n}"])])
    assert fairness.withdraw(ring, LANE, 200) == [
        ("a", flood[:100]),
        ("b", [f"b{n}" for n in range(5)]),
        ("a", flood[100:195]),
    ]
    assert fairness.waiting(ring, LANE) == 2  # a's two chunks, the first in part
    assert fairness.owners(fairness.withdraw(ring, LANE, 1_000)) == dict.fromkeys(flood[195:], "a")


def test_a_project_alone_gets_the_whole_token(ring):
    """Work-conserving: with no other project waiting, a token is filled from the one that is."""
    fairness.deposit(ring, LANE, [("a", ["a1", "a2"]), ("a", ["a3", "a4"]), ("a", ["a5"])])
    assert fairness.owners(fairness.withdraw(ring, LANE, 5)) == dict.fromkeys(["a1", "a2", "a3", "a4", "a5"], "a")


def test_the_sends_of_many_projects_share_one_token(settings):
    """A flush of single sends from many projects is one prepare task, as before they took turns."""
    (published,) = dispatch.prepare_in_turn({f"p{n}": [f"id{n}"] for n in range(50)}, "transactional")
    assert (published.messages, published.tokens, published.task) == (50, 1, "tidings.prepare_next")


def test_a_paced_lane_grants_the_projects_waiting_on_it_in_turn(engine, settings, backup_provider):
    """Two projects' transactional messages ready for a paced provider: the first grant is
    shared between them, not given whole to the first project's flood."""
    client = redis.Redis.from_url(settings.redis_url)
    lane = deliver_queue("fake2", "transactional")
    client.delete(*pacing.keys("fake2"), *client.keys(f"{fairness.PREFIX}{lane}:*") or ["-"])
    flood, other = new_project(engine), new_project(engine)
    flooded, waiting = ready_for(engine, flood, 300, "fake2"), ready_for(engine, other, 2, "fake2")
    size = dispatch.deliver_chunk("fake2")
    ready = [(i, "fake2", "transactional", flood) for i in flooded] + [
        (i, "fake2", "transactional", other) for i in waiting
    ]
    for published in dispatch.deliver_by_lane(ready):  # as prepare hands them on, without the tokens
        fairness.deposit(client, published.lane, published.pieces)
    try:
        for window in (1, 2):  # a grant (a slice of the pace) of one chunk each: no token goes back to the broker
            with paced(settings, "fake2", size * window * SLICES):
                deliver_next("fake2", "transactional")
    finally:
        client.delete(*client.keys(f"{fairness.PREFIX}{lane}:*") or ["-"])
        cancel_the_rest(engine, flood)
    ours = set(flooded) | set(waiting)
    requests: dict[int, set[str]] = {}
    for receipt in backup_provider.delivered():
        if receipt.message_id in ours:
            requests.setdefault(receipt.request, set()).add(receipt.message_id)
    calls = [requests[n] for n in sorted(requests)]
    assert len(calls) == 2
    assert set(waiting) <= calls[0] and len(calls[0]) == size  # the other project's turn came with the first
    assert calls[1] <= set(flooded)


def test_a_project_taken_in_turn_is_never_passed_over_by_the_pace(engine, settings):
    """The pace is asked before ids are taken, so what a token takes is what it sends: had it
    taken a whole chunk's worth of turns first, the other project's ids taken behind the
    flood's would go back ungranted, and lose their turn, grant after grant. `postmark` is a
    lane no worker consumes: the tokens the pace puts off stay in the broker until purged."""
    client = redis.Redis.from_url(settings.redis_url)
    lane = deliver_queue("postmark", "transactional")
    client.delete(*pacing.keys("postmark"), *client.keys(f"{fairness.PREFIX}{lane}:*") or ["-"])
    flood, other = new_project(engine), new_project(engine)
    flooded, waiting = ready_for(engine, flood, 1150, "postmark"), ready_for(engine, other, 2, "postmark")
    fairness.deposit(client, lane, [(flood, flooded[:150]), (flood, flooded[150:]), (other, waiting)])
    try:
        # A grant is a slice of the pace: 375 of 1,500, then 750 of 3,000 less the 375.
        granted = [paced_turn(settings, client, "postmark", "transactional", rate)[0] for rate in (1500, 3000)]
    finally:
        with celery_app.connection_for_write() as connection:
            connection.default_channel.queue_purge(lane)
        client.delete(*client.keys(f"{fairness.PREFIX}{lane}:*") or ["-"])
        cancel_the_rest(engine, flood)
        cancel_the_rest(engine, other)
    first, second = math.ceil(1500 / SLICES), math.ceil(3000 / SLICES) - math.ceil(1500 / SLICES)
    share = math.ceil(first / 2)
    assert list(granted[0]) == flooded[:share] + waiting + flooded[share : first - 2]  # an equal share each
    assert list(granted[1]) == flooded[first - 2 : first - 2 + second]  # the flood alone takes the whole grant


def ready_for(engine, project_id: str, count: int, provider: str) -> list[str]:
    """`count` transactional email messages of `project_id`, ready for `provider` to claim."""
    ids = insert_accepted(engine, project_id, count, priority="transactional")
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE messages SET status = 'ready', provider = :p WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": ids, "p": provider},
        )
    return ids


@pytest.mark.usefixtures("worker")
def test_a_transactional_flood_does_not_hold_another_projects_single_sends_behind_it(
    client, engine, settings, fake_provider
):
    """A's 4,000 transactional messages, accepted as a batch is, then B's single sends: on a
    paced provider, first in, first out, B's would go after all of A's still waiting; in turn,
    B's first goes within a few grants of B's sends being accepted, A's flood mostly still waiting."""
    with transactional_flood(engine, settings, fake_provider, rate=400) as flooded:
        other = create_project(client)
        sends = [other.send(email(to=f"b{n}@example.com")).get_json()["id"] for n in range(5)]
        before = served(fake_provider, flooded)
        for message_id in sends:
            other.wait_for(message_id, {"sent"}, timeout=120)
    order = [receipt.message_id for receipt in fake_provider.delivered()]
    first = min(order.index(message_id) for message_id in sends)
    ahead = len(set(order[:first]) & flooded)
    # In turn: what was in flight and a grant or two (100 a grant); first in, first out: the
    # thousands of A's still waiting when B sent.
    assert ahead - before < 1_000, f"{ahead - before} of A's went between B's sends and B's first"


@pytest.mark.usefixtures("worker")
def test_a_projects_single_sends_during_a_flood_go_with_the_next_slice_of_its_pace(
    client, engine, settings, fake_provider
):
    """A's 4,000 transactional messages, then B's 20 single sends one after another while they
    go, each prepared before the next comes, as a steady sender's are. Each of B's is then a
    chunk of one id: taken a chunk per project per turn, a grant (25 here, one provider call)
    took one or two of B's beside A's, so B's went in most of 20 grants, behind the flood. In
    equal shares of ids from a pace granted in slices (a quarter of the rate, app/delivery/pacing.py),
    each of B's goes with the next grant: at most the grants already in flight (one a thread of
    the worker's four) and a slice of A's reach the provider from when it is ready to when it
    does (30 once, past a whole window of 25, when the pace was granted a window at once)."""
    singles, rate = 20, 25
    readied: list[float] = []
    with transactional_flood(engine, settings, fake_provider, rate=rate) as flooded:
        other = create_project(client)
        sends = []
        for n in range(singles):
            sends.append(other.send(email(to=f"b{n}@example.com")).get_json()["id"])
            other.wait_for(sends[-1], {"ready", "sending", "sent"})  # prepared: a chunk of its own
            readied.append(time.time())
        for message_id in sends:
            other.wait_for(message_id, {"sent"}, timeout=120)
        last = max(r.at for r in fake_provider.delivered() if r.message_id in set(sends))
        receipts = wait_until(  # B's went while the flood still had to go: it went on after them
            fake_provider.delivered,
            lambda seen: any(r.message_id in flooded and r.at > last for r in seen),
            10,
            "the flood to go on after B's last send",
        )
    arrived = {r.message_id: r.at for r in receipts if r.message_id in set(sends)}
    assert len(arrived) == singles
    ahead = [
        sum(1 for r in receipts if r.message_id in flooded and ready < r.at <= arrived[message_id])
        for message_id, ready in zip(sends, readied, strict=True)
    ]
    slice_of_pace = math.ceil(rate / SLICES)  # a slice of the pace, as the pacer grants it
    assert max(ahead) <= (4 + 1) * slice_of_pace, f"A's messages that reached the provider before each of B's: {ahead}"


@contextmanager
def transactional_flood(engine, settings, fake_provider, *, rate: float, size: int = 4_000) -> Iterator[set[str]]:
    """A new project's `size` transactional messages, accepted as a batch is, going to `fake`
    paced at `rate` once the block starts; the ids. Afterwards no token or chunk of it is left."""
    flood = new_project(engine)
    flooded = set(insert_accepted(engine, flood, size, "transactional"))
    with paced(settings, "fake", rate):
        for published in dispatch.prepare(list(flooded), "transactional", project=flood):
            published.apply_async()
        try:
            wait_until(lambda: served(fake_provider, flooded), bool, 60, "the flood to start")
            yield flooded
        finally:
            leave_no_token(engine, flood, [prepare_queue("transactional"), deliver_queue("fake", "transactional")])


def served(provider, ids: set[str]) -> int:
    """How many of `ids` the provider has received."""
    return sum(1 for receipt in provider.delivered() if receipt.message_id in ids)


def leave_no_token(engine, project_id: str, lanes: list[str]) -> None:
    """Cancel the rest of the project's flood and leave no token of its lanes in the broker, the
    worker or on a timer (where a paced token waits its turn), nor its chunks: a token left over
    would take the chunks a later test puts on the lane before that test's own tokens or sweep."""
    cancel_the_rest(engine, project_id)

    def held() -> list:
        """Drop the lanes' tokens the broker and the timers hold; those the worker still runs,
        which may publish more."""
        with celery_app.connection_for_write() as connection:
            for lane in lanes:
                connection.default_channel.queue_purge(lane)
        waiting = [r for r in tokens_held(lanes, state.scheduled_requests) if r.id not in state.revoked]
        if waiting:
            celery_app.control.revoke([r.id for r in waiting])
        return waiting + tokens_held(lanes, state.reserved_requests) + tokens_held(lanes, state.active_requests)

    wait_until(held, lambda running: not running, 30, "the worker to run or drop the flood's tokens", show=len)
    client = redis.Redis.from_url(current_settings().redis_url)
    for lane in lanes:
        client.delete(fairness.ring(lane), fairness.count(lane), fairness.lists(lane) + project_id)


# The lane of a token, from its task's arguments.
TOKEN_LANES = {"tidings.prepare_next": prepare_queue, "tidings.deliver_next": deliver_queue}


def tokens_held(lanes: list[str], requests) -> list:
    """The worker's `requests` (celery.worker.state: this process's worker) that are tokens of `lanes`."""
    return [r for r in list(requests) if r.name in TOKEN_LANES and TOKEN_LANES[r.name](*r.args) in lanes]


def cancel_the_rest(engine, project_id: str) -> None:
    """What the campaign has not sent is not the test's business once it has measured."""
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE messages SET status = 'cancelled' WHERE project_id = :p AND status IN ('accepted', 'ready')"),
            {"p": project_id},
        )


def sent(engine, project_id: str) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT count(*) FROM messages WHERE project_id = :p AND status = 'sent'"), {"p": project_id}
        ).scalar_one()


def send_200_and_wait(client, engine, project, timeout: float = 120) -> float:
    """Seconds until all of a 200-recipient bulk batch of `project` are sent."""
    recipients = [{"email": f"b{i}@example.com"} for i in range(200)]
    body = {"channel": "email", "content": {"subject": "Hi", "text": "Hello"}, "recipients": recipients}
    started = time.monotonic()
    answer = client.post("/v1/messages/batch", json=body, headers=bearer(project.live_key))
    assert answer.status_code == 202, answer.get_json()
    deadline = started + timeout
    while sent(engine, project.id) < 200:
        assert time.monotonic() < deadline, f"only {sent(engine, project.id)} of 200 sent"
        time.sleep(0.05)
    return time.monotonic() - started


def send_200_behind(client, engine, campaign: str, queued) -> tuple[float, int]:
    """Queue the campaign's chunks, then time another project's 200: (seconds, campaign sent meanwhile)."""
    for chunks in queued:
        chunks.apply_async()
    try:
        before = sent(engine, campaign)
        seconds = send_200_and_wait(client, engine, create_project(client))
        return seconds, sent(engine, campaign) - before
    finally:
        leave_no_token(engine, campaign, [prepare_queue("bulk"), deliver_queue("fake", "bulk")])


@pytest.mark.usefixtures("worker")
def test_a_campaign_of_100000_does_not_hold_another_projects_200_behind_it(client, engine, fake_provider, capsys):
    idle_seconds = send_200_and_wait(client, engine, create_project(client))
    campaign = new_project(engine)
    ids = insert_accepted(engine, campaign, 100_000)
    busy_seconds, campaign_sent = send_200_behind(
        client, engine, campaign, dispatch.prepare(ids, "bulk", project=campaign)
    )
    with capsys.disabled():
        print(
            f"\nfairness: 200 bulk sent in {idle_seconds:.2f} s idle, {busy_seconds:.2f} s behind a campaign of "
            f"100,000 ({busy_seconds / idle_seconds:.1f}x); {campaign_sent} of the campaign sent meanwhile"
        )
    # First in, first out, all of the campaign still waiting would go first (~100,000); in turn,
    # what it had in flight and a chunk or two (100 to 300 alone; once 10,300 on a loaded box,
    # where prepare ran far ahead of B's turn in the deliver lane).
    assert campaign_sent < 25_000


@contextmanager
def paced(settings, provider: str, per_second: float) -> Iterator[None]:
    """`provider` allows `per_second` messages for the test, as `<PROVIDER>_RATE_PER_SEC` says."""
    configure(replace(settings, rates={**settings.rates, provider: per_second}))
    try:
        yield
    finally:
        configure(settings)


@pytest.mark.usefixtures("worker")
def test_a_paced_providers_lane_takes_projects_in_turn(client, engine, settings, fake_provider, capsys):
    """Prepare is fast, so the wait is in the deliver lane: first in, first out, B's 200 would
    go after all of A's 20,000 at the provider's 400 a second, 50 s."""
    campaign_size, rate = 20_000, 400
    with paced(settings, "fake", rate):
        idle_seconds = send_200_and_wait(client, engine, create_project(client))
        campaign = new_project(engine)
        ids = ready_messages(engine, campaign_size, campaign)
        busy_seconds, campaign_sent = send_200_behind(
            client, engine, campaign, dispatch.deliver("fake", "bulk", ids, project=campaign)
        )
    with capsys.disabled():
        print(
            f"\nfairness at {rate}/s: 200 bulk sent in {idle_seconds:.2f} s idle, {busy_seconds:.2f} s behind a "
            f"campaign of {campaign_size:,} ready ({busy_seconds / idle_seconds:.1f}x); {campaign_sent} of the "
            "campaign sent meanwhile"
        )
    # In turn, B's two chunks share the pace with A's: A sends about as much as B meanwhile.
    assert campaign_sent < campaign_size // 4


def test_a_repeat_of_a_chunk_spends_no_pace_on_rows_already_sent(engine, settings, backup_provider):
    """The sweeper dispatches rows that wait their turn long again; the repeat must not take
    the provider's rate for the rows the first copy sent."""
    client = redis.Redis.from_url(settings.redis_url)
    client.delete(*pacing.keys("fake2"))
    project = new_project(engine)
    ids = ready_messages(engine, 3, project)
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE messages SET provider = 'fake2', status = CASE WHEN id = CAST(:ready AS uuid) "
                "THEN 'ready' ELSE 'sent' END WHERE id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"ids": ids, "ready": ids[2]},
        )
    fairness.deposit(client, deliver_queue("fake2", "bulk"), [(project, ids)])
    with paced(settings, "fake2", 1000):
        deliver_next("fake2", "bulk")
    granted = sum(int(member.rsplit(b":", 1)[1]) for member in client.zrange("tidings:pace:fake2", 0, -1))
    assert granted == 1
    assert [r.message_id for r in backup_provider.delivered() if r.message_id in ids] == [ids[2]]
