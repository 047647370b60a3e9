"""Moving workflow runs through their steps, a set at a time.

`advance` takes the runs a task names at one step, locks those still there and running,
and carries each as far as it can go now: a send writes its message and goes on, a branch
that holds goes on, a delay or a digest's window makes it wait, a failed condition, a
throttle or the last step ends it. Each step kind is one or two statements for the whole
set, and the runs' new state, their step records and events are one statement each, so a
task of 500 runs costs a fixed few round trips whatever its runs do.

Every change is conditional on the run's step and status under a row lock, so a task
message delivered twice moves nothing twice, and a run cancelled while a task holds it
is cancelled after that task's step, never in the middle of it. What the task must
publish (prepare tasks for the messages, the next step's task) comes back in `Moved` for
the caller to send after its commit.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.config import MAX_COUNTDOWN
from app.db import Publishable
from app.delivery import dispatch, store
from app.enums import Channel, EventType, Priority, RunStatus
from app.services import intake, templates
from app.workflows.conditions import Facts, asks_subscriber, holds, lookup, message_steps

# Digest items handed to the template, at most: `count` still says how many were gathered.
MAX_DIGEST_ITEMS = 100
# A wait longer than this is parked in PostgreSQL for beat, not held by the broker.
COUNTDOWN_LIMIT = MAX_COUNTDOWN - 60
# A send step's priority unless it names one: a trigger is a batch-shaped call (up to 10,000
# subscribers or a whole topic), so its sends wait behind single sends as a batch's do, and
# no project's workflow can fill the transactional lane without saying so step by step.
DEFAULT_PRIORITY = Priority.BULK
# The furthest a time in a run's data, with its offset, may lie from now (either way).
MAX_UNTIL = timedelta(days=365)
# Steps one task carries a run through at most: a long chain of steps that take no time
# goes on in the next task, so no task holds its runs' locks for long.
MAX_HOPS = 64


@dataclass
class Run:
    """One run as a task carries it: read once, changed in memory, written back once."""

    id: str
    project_id: str
    workflow_key: str
    workflow_version: int
    subscriber_id: str
    test: bool
    created_at: datetime
    data: dict[str, Any]
    step: int
    digest_id: str | None
    status: RunStatus = RunStatus.RUNNING
    due_at: datetime | None = None
    reason: str | None = None
    data_changed: bool = False
    records: list[dict[str, Any]] = field(default_factory=list)

    def record(self, kind: str, outcome: str, message_id: str | None = None, **detail: Any) -> None:
        self.records.append(
            {"step": self.step, "kind": kind, "outcome": outcome, "message_id": message_id, "detail": detail or None}
        )

    def end(self, status: RunStatus, reason: str | None = None) -> None:
        self.status, self.reason = status, reason


@dataclass
class Moved:
    """What a task must publish once its transaction commits; the runs it locked (those
    another task holds are skipped, not its own), and how many of them it moved."""

    publish: list[Publishable] = field(default_factory=list)
    locked: list[str] = field(default_factory=list)
    runs: int = 0


LOCK = text(
    """
    SELECT r.id::text, r.project_id, r.workflow_key, r.workflow_version, r.subscriber_id, r.test, r.created_at,
           COALESCE(r.data, t.data) AS data, r.step, r.digest_id::text, r.due_at
    FROM workflow_runs r JOIN workflow_triggers t ON t.id = r.trigger_id
    WHERE r.id = ANY(CAST(:ids AS uuid[])) AND r.step = :step AND r.status = 'running'
    ORDER BY r.id
    FOR UPDATE OF r SKIP LOCKED
    """
)


def advance(session: Session, run_ids: Sequence[str], step: int) -> Moved:
    """Carry the named runs that are at `step`, running and due, as far as they go now."""
    moved = Moved()
    now = datetime.now(UTC)
    runs = []
    early: list[tuple[str, int, datetime]] = []
    for row in session.execute(LOCK, {"ids": list(run_ids), "step": step}):
        moved.locked.append(row.id)
        if row.due_at is not None and row.due_at > now:
            early.append((row.id, step, row.due_at))  # a countdown that fired before its time
            continue
        runs.append(Run(*row[:-1]))
    moved.publish += _wake_at(early, now)
    if not runs:
        return moved
    steps = _compiled(session, runs)
    moving = runs
    for _ in range(MAX_HOPS):
        by_step: dict[tuple[str, str, int, bool, int], list[Run]] = defaultdict(list)
        for run in moving:
            by_step[(run.project_id, run.workflow_key, run.workflow_version, run.test, run.step)].append(run)
        moving = []
        for (project, key, version, _, index), group in by_step.items():
            definition = steps[(project, key, version)]
            if index >= len(definition):
                for run in group:
                    run.end(RunStatus.COMPLETED)
                continue
            STEPS[definition[index]["kind"]](session, group, definition[index], moved)
            # Only a run that went past the step goes on now: the others wait, or ended.
            moving += [r for r in group if r.status is RunStatus.RUNNING and r.due_at is None and r.step > index]
        if not moving:
            break
    _write(session, runs, now)
    unfinished = {run.id for run in moving}  # still going after MAX_HOPS: on in a task of their own, at once
    waiting = [
        (r.id, r.step, r.due_at or now)
        for r in runs
        if r.status is RunStatus.RUNNING and (r.due_at is not None or r.id in unfinished)
    ]
    moved.publish += _wake_at(waiting, now)
    moved.runs = len(runs)
    return moved


def _compiled(session: Session, runs: Sequence[Run]) -> dict[tuple[str, str, int], list[dict[str, Any]]]:
    """The compiled steps of each workflow version among the runs, read once per version."""
    versions = sorted({(r.project_id, r.workflow_key, r.workflow_version) for r in runs})
    rows = session.execute(
        text(
            """
            SELECT w.project_id, w.key, w.version, w.compiled
            FROM workflows w JOIN unnest(CAST(:projects AS text[]), CAST(:keys AS text[]), CAST(:versions AS int[]))
                 AS v(project_id, key, version) USING (project_id, key, version)
            """
        ),
        {"projects": [v[0] for v in versions], "keys": [v[1] for v in versions], "versions": [v[2] for v in versions]},
    )
    return {(row.project_id, row.key, row.version): row.compiled["steps"] for row in rows}


def _send(session: Session, runs: list[Run], step: dict[str, Any], moved: Moved) -> None:
    """One message per run, written with one COPY, handed to prepare after the commit."""
    first = runs[0]
    channel = Channel(step["channel"])
    pinned = templates.latest(session, first.project_id, step["template"])
    if pinned is None or pinned.channel != channel:
        reason = f"template {step['template']!r} for {channel} is gone"
        for run in runs:
            run.record("send", "failed", reason=reason)
            run.end(RunStatus.FAILED, reason)
        return
    priority = Priority(step["priority"] or DEFAULT_PRIORITY)
    common = intake.Common(
        channel=channel,
        priority=priority,
        category=step["category"],
        test=first.test,
        template=step["template"],
        template_version=pinned.version,
        meta={"workflow": first.workflow_key, "workflow_version": first.workflow_version},
    )
    recipients = [intake.BatchRecipient(run.subscriber_id, None, run.data) for run in runs]
    ids = intake.copy_messages(session, first.project_id, common, recipients)
    for run, message_id in zip(runs, ids, strict=True):
        run.record("send", "sent", message_id, channel=channel.value)
        run.step += 1
    moved.publish += dispatch.prepare(ids, priority, project=first.project_id)


def _delay(session: Session, runs: list[Run], step: dict[str, Any], moved: Moved) -> None:
    """Wait a fixed time, or until a time in the data (plus an offset); a time past goes on, one
    missing or more than a year from now fails its run alone."""
    now = datetime.now(UTC)
    for run in runs:
        until = now + timedelta(seconds=step["seconds"]) if "seconds" in step else _until(run.data, step, now)
        if isinstance(until, str):
            run.record("delay", "failed", reason=until)
            run.end(RunStatus.FAILED, until)
            continue
        run.record("delay", "waited", until=until.isoformat())
        run.step += 1
        if until > now:
            run.due_at = until


def _until(data: dict[str, Any], step: dict[str, Any], now: datetime) -> datetime | str:
    """The time in the run's data plus the step's offset, or why the run cannot wait for it.

    Bounds the tenant's time to a year either side of now before any arithmetic on it, so a
    year 9999 neither overflows (failing every run in the task) nor parks a run for ever.
    """
    at = _time_in(lookup(data, step["until"]))
    if at is None:
        return f"delay: data.{step['until']} is not a time with its offset"
    offset = timedelta(seconds=step["offset"])
    if abs(at - now + offset) > MAX_UNTIL:
        return f"delay: data.{step['until']} with its offset is more than a year from now"
    return at + offset


def _time_in(value: Any) -> datetime | None:
    """An ISO 8601 time with its zone (a time without one is ambiguous: refused)."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _branch(session: Session, runs: list[Run], step: dict[str, Any], moved: Moved) -> None:
    """Go on where the condition holds; end the run, completed, where it does not."""
    condition = step["condition"]
    engagements = _engagements(session, runs, message_steps(condition))
    subscribers = _subscribers(session, runs) if asks_subscriber(condition) else {}
    for run in runs:
        facts = Facts(run.data, subscribers.get(run.subscriber_id), engagements.get(run.id, {}))
        if holds(condition, facts):
            run.record("branch", "continued")
            run.step += 1
        else:
            run.record("branch", "stopped")
            run.end(RunStatus.COMPLETED, "a branch's condition did not hold")


ENGAGED = text(
    """
    SELECT s.run_id::text AS run_id, s.step,
           m.status = 'delivered' OR EXISTS (SELECT 1 FROM events e WHERE e.message_id = m.id AND e.type = 'delivered')
               AS delivered,
           EXISTS (SELECT 1 FROM message_engagements g WHERE g.message_id = m.id AND g.kind = 'opened') AS opened,
           EXISTS (SELECT 1 FROM message_engagements g WHERE g.message_id = m.id AND g.kind = 'clicked') AS clicked,
           EXISTS (SELECT 1 FROM inbox_items i WHERE i.message_id = m.id AND i.read_at IS NOT NULL) AS read
    FROM workflow_run_steps s JOIN messages m ON m.id = s.message_id
    WHERE s.run_id = ANY(CAST(:runs AS uuid[])) AND s.step = ANY(CAST(:steps AS int[]))
    """
)


def _engagements(session: Session, runs: Sequence[Run], steps: set[int]) -> dict[str, dict[int, frozenset[str]]]:
    """What each run's messages of `steps` did: delivered, opened, clicked, read (in-app).

    Opened, clicked or read imply delivered, whatever the provider reported.
    """
    if not steps:
        return {}
    found: dict[str, dict[int, frozenset[str]]] = defaultdict(dict)
    rows = session.execute(ENGAGED, {"runs": [r.id for r in runs], "steps": sorted(steps)})
    for row in rows:
        did = {kind for kind in ("opened", "clicked", "read") if getattr(row, kind)}
        if row.delivered or did:
            did.add("delivered")
        found[row.run_id][row.step] = frozenset(did)
    return found


def _subscribers(session: Session, runs: Sequence[Run]) -> dict[str, dict[str, Any]]:
    rows = session.execute(
        text(
            """
            SELECT external_id, email, phone, locale, timezone, data FROM subscribers
            WHERE project_id = :project AND external_id = ANY(CAST(:ids AS text[]))
            """
        ),
        {"project": runs[0].project_id, "ids": sorted({r.subscriber_id for r in runs})},
    )
    return {row.external_id: dict(row._mapping) for row in rows}


def _throttle(session: Session, runs: list[Run], step: dict[str, Any], moved: Moved) -> None:
    """At most `limit` runs per subscriber (and key) through this step per window; the rest end.

    Exact across processes: each (subscriber, key) is counted under a transaction-scoped
    advisory lock, taken in one order by every task, so two tasks never count the same
    window at once, and each sees what the other let through once it committed.
    """
    first = runs[0]
    keys = {run.id: _key(run, step) for run in runs}
    groups = sorted(
        {f"{first.project_id}\x1f{first.workflow_key}\x1f{run.subscriber_id}\x1f{keys[run.id]}" for run in runs}
    )
    session.execute(
        text(
            """
            SELECT count(pg_advisory_xact_lock(hashtextextended(g, 0)))
            FROM (SELECT g FROM unnest(CAST(:groups AS text[])) AS g ORDER BY g) AS ordered
            """
        ),
        {"groups": groups},
    )
    passed = session.execute(
        text(
            """
            SELECT r.subscriber_id, s.detail ->> 'key' AS key, count(*) AS n
            FROM workflow_runs r JOIN workflow_run_steps s ON s.run_id = r.id
            WHERE r.project_id = :project AND r.workflow_key = :workflow
              AND r.subscriber_id = ANY(CAST(:subscribers AS text[]))
              AND s.step = :step AND s.outcome = 'passed' AND s.at > now() - make_interval(secs => :window)
            GROUP BY 1, 2
            """
        ),
        {
            "project": first.project_id,
            "workflow": first.workflow_key,
            "subscribers": sorted({r.subscriber_id for r in runs}),
            "step": first.step,
            "window": step["window"],
        },
    )
    used = {(row.subscriber_id, row.key): row.n for row in passed}
    for run in sorted(runs, key=lambda r: (r.created_at, r.id)):
        group = (run.subscriber_id, keys[run.id])
        if used.get(group, 0) < step["limit"]:
            used[group] = used.get(group, 0) + 1
            run.record("throttle", "passed", key=keys[run.id])
            run.step += 1
        else:
            run.record("throttle", "throttled", key=keys[run.id])
            run.end(RunStatus.THROTTLED, f"more than {step['limit']} runs in {step['window']} s")


def _key(run: Run, step: dict[str, Any]) -> str:
    """A throttle's or digest's key for the run: the referenced data as text, bounded."""
    if step["key"] is None:
        return ""
    value = lookup(run.data, step["key"])
    return (value if isinstance(value, str) else json.dumps(value, sort_keys=True))[:255]


JOIN_DIGEST = text(
    """
    INSERT INTO workflow_digests AS d (id, project_id, workflow_key, step, subscriber_id, digest_key, leader_id,
                                       closes_at, latest_close_at)
    SELECT g.id, :project, :workflow, :step, g.subscriber_id, g.digest_key, g.leader_id,
           now() + make_interval(secs => :window), now() + make_interval(secs => :most)
    FROM unnest(CAST(:ids AS uuid[]), CAST(:subscribers AS text[]), CAST(:keys AS text[]), CAST(:leaders AS uuid[]))
         AS g(id, subscriber_id, digest_key, leader_id)
    ON CONFLICT (project_id, workflow_key, step, subscriber_id, digest_key) WHERE flushed_at IS NULL
    DO UPDATE SET closes_at = CASE WHEN :sliding THEN LEAST(now() + make_interval(secs => :window), d.latest_close_at)
                                   ELSE d.closes_at END
    RETURNING d.id::text, d.subscriber_id, d.digest_key, d.leader_id::text, d.closes_at
    """
)


def _digest(session: Session, runs: list[Run], step: dict[str, Any], moved: Moved) -> None:
    """Gather runs per subscriber and key into one digest; its first run goes on with them all.

    A run arriving joins the open digest (or opens one and leads it) and, unless it leads,
    ends `digested`. A leader waits at this step until the window closes, then flushes.
    Joining takes the digest row's lock (the upsert) and flushing updates it, so the two
    never interleave: a run joins before the flush and is in its items, or after it and
    opens the next digest. Never both, never neither.
    """
    leaders = [r for r in runs if r.digest_id is not None]
    arriving = [r for r in runs if r.digest_id is None]
    if arriving:
        _join(session, arriving, step)
    if leaders:
        _flush(session, leaders)


def _join(session: Session, runs: list[Run], step: dict[str, Any]) -> None:
    first = runs[0]
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for run in sorted(runs, key=lambda r: (r.created_at, r.id)):
        groups[(run.subscriber_id, _key(run, step))].append(run)
    rows = session.execute(
        JOIN_DIGEST,
        {
            "project": first.project_id,
            "workflow": first.workflow_key,
            "step": first.step,
            "window": step["window"],
            "most": step["max"],
            "sliding": step["max"] > step["window"],
            "ids": [str(uuid.uuid4()) for _ in groups],
            "subscribers": [subscriber for subscriber, _ in groups],
            "keys": [key for _, key in groups],
            "leaders": [members[0].id for members in groups.values()],
        },
    )
    for row in rows:
        for run in groups[(row.subscriber_id, row.digest_key)]:
            run.digest_id = row.id
            if run.id == row.leader_id:
                run.due_at = row.closes_at
            else:
                run.record("digest", "digested", digest_id=row.id, into=row.leader_id)
                run.end(RunStatus.DIGESTED, f"gathered into run {row.leader_id}")


def _flush(session: Session, leaders: list[Run]) -> None:
    """Close the leaders' digests whose time has come and hand each its runs' data; a
    sliding window that moved since makes its leader wait again."""
    digests = {run.digest_id: run for run in leaders}
    flushed = (
        session.execute(
            text(
                """
            UPDATE workflow_digests SET flushed_at = now()
            WHERE id = ANY(CAST(:ids AS uuid[])) AND flushed_at IS NULL AND closes_at <= now()
            RETURNING id::text
            """
            ),
            {"ids": list(digests)},
        )
        .scalars()
        .all()
    )
    later = [digest_id for digest_id in digests if digest_id not in set(flushed)]
    if later:
        for row in session.execute(
            text("SELECT id::text, closes_at FROM workflow_digests WHERE id = ANY(CAST(:ids AS uuid[]))"),
            {"ids": later},
        ):
            digests[row.id].due_at = row.closes_at
    items: dict[str, list[Any]] = defaultdict(list)
    counts: dict[str, int] = {}
    for row in session.execute(GATHER, {"ids": list(flushed), "most": MAX_DIGEST_ITEMS}):
        items[row.digest_id].append(row.data)
        counts[row.digest_id] = row.total
    for digest_id in flushed:
        run = digests[digest_id]
        run.record("digest", "flushed", digest_id=digest_id, count=counts.get(digest_id, 0))
        run.data = {**run.data, "items": items[digest_id], "count": counts.get(digest_id, 0)}
        run.data_changed = True
        run.digest_id = None  # gathered: a later digest step starts a digest of its own
        run.step += 1


# Each digest's runs' data in arrival order (at most `most` of them), with how many there were.
GATHER = text(
    """
    SELECT digest_id, data, total FROM (
        SELECT r.digest_id::text, COALESCE(r.data, t.data) AS data, count(*) OVER w AS total,
               row_number() OVER (w ORDER BY r.created_at, r.id) AS n
        FROM workflow_runs r JOIN workflow_triggers t ON t.id = r.trigger_id
        WHERE r.digest_id = ANY(CAST(:ids AS uuid[]))
        WINDOW w AS (PARTITION BY r.digest_id)
    ) AS gathered WHERE n <= :most ORDER BY digest_id, n
    """
)


STEPS: dict[str, Callable[[Session, list[Run], dict[str, Any], Moved], None]] = {
    "send": _send,
    "delay": _delay,
    "branch": _branch,
    "digest": _digest,
    "throttle": _throttle,
}


def _write(session: Session, runs: Sequence[Run], now: datetime) -> None:
    """Each run's new state, its step records and its events: three statements for the set."""
    session.execute(
        text(
            """
            UPDATE workflow_runs r
            SET step = u.step, status = u.status, due_at = u.due_at, parked = u.parked, digest_id = u.digest_id,
                data = COALESCE(u.data, r.data), reason = u.reason, updated_at = now(),
                ended_at = CASE WHEN u.status <> 'running' THEN now() END
            FROM unnest(CAST(:ids AS uuid[]), CAST(:steps AS int[]), CAST(:statuses AS text[]),
                        CAST(:due AS timestamptz[]), CAST(:parked AS boolean[]), CAST(:digests AS uuid[]),
                        CAST(:data AS jsonb[]), CAST(:reasons AS text[]))
                 AS u(id, step, status, due_at, parked, digest_id, data, reason)
            WHERE r.id = u.id
            """
        ),
        {
            "ids": [r.id for r in runs],
            "steps": [r.step for r in runs],
            "statuses": [r.status.value for r in runs],
            "due": [r.due_at if r.status is RunStatus.RUNNING else None for r in runs],
            "parked": [_parks(r, now) for r in runs],
            "digests": [r.digest_id for r in runs],
            "data": [json.dumps(r.data) if r.data_changed else None for r in runs],
            "reasons": [r.reason for r in runs],
        },
    )
    records = [(run, record) for run in runs for record in run.records]
    if records:
        session.execute(
            text(
                """
                INSERT INTO workflow_run_steps (run_id, step, kind, outcome, message_id, detail)
                SELECT * FROM unnest(CAST(:runs AS uuid[]), CAST(:steps AS int[]), CAST(:kinds AS text[]),
                                     CAST(:outcomes AS text[]), CAST(:messages AS uuid[]), CAST(:details AS jsonb[]))
                ON CONFLICT (run_id, step) DO NOTHING
                """
            ),
            {
                "runs": [run.id for run, _ in records],
                "steps": [r["step"] for _, r in records],
                "kinds": [r["kind"] for _, r in records],
                "outcomes": [r["outcome"] for _, r in records],
                "messages": [r["message_id"] for _, r in records],
                "details": [json.dumps(r["detail"]) if r["detail"] else None for _, r in records],
            },
        )
    events = [
        store.NewEvent(record["message_id"], run.project_id, EventType.WORKFLOW_STEP, _step_event(run, record))
        for run, record in records
    ]
    events += [
        store.NewEvent(
            None,
            run.project_id,
            EventType.WORKFLOW_COMPLETED,
            run_event(run.id, run.workflow_key, run.workflow_version, run.subscriber_id, run.status, run.reason),
        )
        for run in runs
        if run.status is not RunStatus.RUNNING
    ]
    store.record_events(session, events)


def _step_event(run: Run, record: dict[str, Any]) -> dict[str, Any]:
    return {
        **run_event(run.id, run.workflow_key, run.workflow_version, run.subscriber_id, None, None),
        "step": record["step"],
        "kind": record["kind"],
        "outcome": record["outcome"],
    }


def run_event(
    run_id: str, workflow: str, version: int, subscriber_id: str, status: RunStatus | None, reason: str | None
) -> dict[str, Any]:
    """What a workflow event says of its run; `status` and `reason` where the run ended."""
    event = {"run_id": run_id, "workflow": workflow, "version": version, "subscriber_id": subscriber_id}
    if status is not None:
        event.update(status=status.value, reason=reason)
    return event


def fail_run(session: Session, run_id: str, reason: str) -> bool:
    """End one running run as failed with `reason`, and say so in the log: what a step task
    does with a run it cannot handle, so the other runs of its task go on. False if the
    run had ended already."""
    reason = store.storable(reason)
    row = session.execute(
        text(
            """
            UPDATE workflow_runs SET status = 'failed', reason = :reason, due_at = NULL, parked = false,
                                     updated_at = now(), ended_at = now()
            WHERE id = CAST(:id AS uuid) AND status = 'running'
            RETURNING project_id, workflow_key, workflow_version, subscriber_id
            """
        ),
        {"id": run_id, "reason": reason},
    ).first()
    if row is None:
        return False
    data = run_event(run_id, row.workflow_key, row.workflow_version, row.subscriber_id, RunStatus.FAILED, reason)
    store.record_events(session, [store.NewEvent(None, row.project_id, EventType.WORKFLOW_COMPLETED, data)])
    return True


def _parks(run: Run, now: datetime) -> bool:
    return run.status is RunStatus.RUNNING and run.due_at is not None and _waits_long(run.due_at, now)


def _waits_long(due_at: datetime, now: datetime) -> bool:
    return (due_at - now).total_seconds() > COUNTDOWN_LIMIT


def _wake_at(waiting: Sequence[tuple[str, int, datetime]], now: datetime) -> list[Publishable]:
    """Countdown tasks for the (run, step, due) that wait a short while; long waits are parked for beat."""
    by_step: dict[tuple[int, float], list[str]] = defaultdict(list)
    for run_id, step, due_at in waiting:
        if not _waits_long(due_at, now):
            countdown = max((due_at - now).total_seconds(), 0) + 0.05
            by_step[(step, round(countdown, 1))].append(run_id)
    return [
        signature
        for (step, countdown), ids in by_step.items()
        for signature in dispatch.workflow_steps(ids, step, countdown)
    ]
