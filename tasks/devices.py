"""Push to every device: a push message to a subscriber goes to each of its tokens, and its
status sums up what the provider answered for each.

Prepare records the subscriber's tokens as they are then (at most MAX_PUSH_TOKENS, each
once), one row per device (app/delivery/device_store.py); a suppressed token is recorded
as such and not sent to. Deliver turns each claimed message with devices into one *unit*
per device still waiting: the message's row with the device's token and an id of its own
(`<message id>:<n>`). Accounts, provider batches (FCM takes one token per request, the
`log` provider 500), pauses and follow-ups (an `UNREGISTERED` token is removed from its
subscriber) then work per device, unchanged. `fold` turns the devices' answers back into
one answer per message for tasks/outcomes.py:

1. a device got no answer on its merits (a pause, a shutdown) → the message goes back to
   `ready` with its attempt given back; what the other devices answered is kept;
2. else a device failed transiently → the message is `retrying`, for those devices only,
   even when another device took it: a message is final once every device is. When its
   attempts run out it is `sent` if any device took it, else `dead`;
3. else → `sent` if any device ever took it, `failed` if every device failed for good.

Devices that took the message are never sent it again: a retry reads only the waiting ones.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from sqlalchemy import Row
from sqlalchemy.orm import Session

from app.content.addresses import normalise_address
from app.delivery import device_store, store
from app.delivery.device_store import WAITING, NewDevice, Settled
from app.enums import Channel, DeviceStatus
from app.schemas.audience import MAX_PUSH_TOKENS
from providers.base import Outcome, SendResult
from tasks.outcomes import PROVIDER_WIDE, SendRun

# A device's answer → its new status (a transient one is dead once the message's attempts are).
SETTLED_AS = {Outcome.SENT: DeviceStatus.SENT, Outcome.PERMANENT: DeviceStatus.FAILED}


def tokens_of(row: Row) -> list[str]:
    """The tokens a push message to a subscriber goes to: the subscriber's as they are now
    (also for a dead letter requeued), normalised, each once, in its order, at most
    MAX_PUSH_TOKENS. None for other messages: a raw token is the message's one address."""
    if row.channel != Channel.PUSH or not row.has_subscriber:
        return []
    usable = (normalise_address(Channel.PUSH, t) for t in row.push_tokens or () if isinstance(t, str) and t.strip())
    return list(dict.fromkeys(usable))[:MAX_PUSH_TOKENS]


def addresses(
    rows: Sequence[Row], tokens: Mapping[str, list[str]], suppressed: Mapping[tuple[str, str, str], str]
) -> dict[str, str | None]:
    """Message id → the address prepare decides a push to a subscriber by: its first token
    not suppressed; the first when all are (so it is suppressed, with that token's reason);
    none when it has no token (it fails for want of one, also when requeued after an
    earlier prepare had recorded one)."""
    chosen: dict[str, str | None] = {}
    for row in rows:
        if row.channel == Channel.PUSH and row.has_subscriber:
            mine = tokens.get(row.id, [])
            live = [t for t in mine if (row.project_id, Channel.PUSH.value, t) not in suppressed]
            chosen[row.id] = next(iter(live or mine), None)
    return chosen


def new_devices(
    ready: Sequence[str],
    projects: Mapping[str, str],
    tokens: Mapping[str, list[str]],
    suppressed: Mapping[tuple[str, str, str], str],
) -> list[NewDevice]:
    """The device rows of the messages prepare made ready (`projects`: message id → project)."""
    devices = []
    for message_id in ready:
        for n, token in enumerate(tokens.get(message_id, ())):
            off = (projects[message_id], Channel.PUSH.value, token) in suppressed
            devices.append(NewDevice(message_id, n, token, DeviceStatus.SUPPRESSED if off else DeviceStatus.PENDING))
    return devices


def unit_id(message_id: str, n: int) -> str:
    """The id a device's send travels under: the provider's results name it, and a provider
    that de-duplicates on our id (`fake`) tells the devices of one message apart."""
    return f"{message_id}:{n}"


@dataclass(frozen=True)
class DeviceUnit:
    """A claimed push message as one of its devices is sent it: its own id and token; the
    content, project and account are the message's."""

    message: store.Claimed
    id: str
    to_address: str
    n: int

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "message":  # not during copy or unpickling
            raise AttributeError(name)
        return getattr(self.message, name)


def expand(claimed: Sequence[store.Claimed], devices: Sequence[device_store.Device]) -> list[store.Claimed]:
    """What to send: a unit per waiting device of a message with devices (none when all are
    settled), the row itself for every other message. A unit reads as its message's row, so
    what sends rows sends it; the types cannot tell, hence the cast."""
    known = {device.message_id for device in devices}
    waiting: dict[str, list[device_store.Device]] = defaultdict(list)
    for device in devices:
        if device.status in WAITING:
            waiting[device.message_id].append(device)
    units: list[store.Claimed] = []
    for row in claimed:
        if row.id in known:
            units += [cast(store.Claimed, DeviceUnit(row, unit_id(row.id, d.n), d.token, d.n)) for d in waiting[row.id]]
        else:
            units.append(row)
    return units


@dataclass
class Folded:
    """The devices' answers as one per message, and what to write for each device."""

    runs: list[tuple[Sequence[store.Claimed], SendRun]] = field(default_factory=list)
    settled: list[Settled] = field(default_factory=list)
    owner: dict[str, str] = field(default_factory=dict)  # unit id → message id
    # Message id → what its event adds: how many of its devices stand where.
    summaries: dict[str, dict[str, Any]] = field(default_factory=dict)


def fold(
    sent: Sequence[tuple[Sequence[store.Claimed | DeviceUnit], SendRun]],
    claimed: Sequence[store.Claimed],
    devices: Sequence[device_store.Device],
    max_attempts: Mapping[Channel, int],
) -> Folded:
    """One answer per claimed message from its units' answers (the rules of the docstring)."""
    known: dict[str, list[device_store.Device]] = defaultdict(list)
    for device in devices:
        known[device.message_id].append(device)
    folded = Folded()
    for units, run in sent:
        folded.runs.append(fold_run(folded, units, run, known, max_attempts))
    # Every device settled before this claim (nothing to send): the message ends as they did.
    sent_to = set(folded.owner.values())
    idle = [row for row in claimed if row.id in known and row.id not in sent_to]
    if idle:
        verdicts = [judge(folded, row, [], known[row.id], max_attempts) for row in idle]
        folded.runs.append((idle, SendRun(results=[v for v in verdicts if v is not None])))
    return folded


def fold_run(
    folded: Folded,
    units: Sequence[store.Claimed | DeviceUnit],
    run: SendRun,
    known: Mapping[str, list[device_store.Device]],
    max_attempts: Mapping[Channel, int],
) -> tuple[list[store.Claimed], SendRun]:
    """One account's run, its devices' answers turned into their messages'; other messages
    keep their own."""
    answers = {r.message_id: r for r in run.results}
    unsent = {u.id for u in run.unsent}
    messages = replace(run, results=[], unsent=[])
    rows: list[store.Claimed] = []
    groups: dict[str, list[DeviceUnit]] = defaultdict(list)
    for unit in units:
        if isinstance(unit, DeviceUnit):
            folded.owner[unit.id] = unit.message.id
            groups[unit.message.id].append(unit)
            continue
        folded.owner[unit.id] = unit.id
        rows.append(unit)
        if unit.id in unsent:
            messages.unsent.append(unit)
        elif unit.id in answers:
            messages.results.append(answers[unit.id])
    for message_id, group in groups.items():
        message = group[0].message
        rows.append(message)
        verdict = judge(folded, message, [(u, answers.get(u.id)) for u in group], known[message_id], max_attempts)
        if verdict is None:
            messages.unsent.append(message)
        else:
            messages.results.append(verdict)
    return rows, messages


def judge(
    folded: Folded,
    message: store.Claimed,
    answers: Sequence[tuple[DeviceUnit, SendResult | None]],
    devices: Sequence[device_store.Device],
    max_attempts: Mapping[Channel, int],
) -> SendResult | None:
    """The message's answer from its devices' (None: back to ready), and each device settled."""
    unanswered = any(r is None or r.outcome in PROVIDER_WIDE for _, r in answers)
    exhausted = not unanswered and message.attempts >= max_attempts[Channel(message.channel)]
    status = {d.n: DeviceStatus(d.status) for d in devices}
    taken = {d.n: d.provider_message_id for d in devices if d.status == DeviceStatus.SENT}
    transient: list[SendResult] = []
    refused: list[SendResult] = []
    for unit, result in answers:
        if result is None or result.outcome in PROVIDER_WIDE:
            continue  # asked again next time, its attempt given back with the message's
        if result.outcome is Outcome.SENT:
            taken[unit.n] = result.provider_message_id
        elif result.outcome is Outcome.TRANSIENT:
            transient.append(result)
        else:
            refused.append(result)
        fallback = DeviceStatus.DEAD if exhausted else DeviceStatus.RETRYING
        status[unit.n] = SETTLED_AS.get(result.outcome, fallback)
        folded.settled.append(
            Settled(
                message.id,
                unit.n,
                status[unit.n],
                provider_message_id=result.provider_message_id,
                error=result.error,
            )
        )
    folded.summaries[message.id] = {"devices": dict(Counter(s.value for s in status.values()))}
    if unanswered:
        return None
    if transient and not (exhausted and taken):
        return SendResult(message.id, Outcome.TRANSIENT, error=transient[0].error)
    if taken:
        return SendResult(message.id, Outcome.SENT, provider_message_id=taken[min(taken)])
    reason = refused[0].error if refused else "no device left to send to"
    return SendResult(message.id, Outcome.PERMANENT, error=reason)


def settle(session: Session, folded: Folded, wanted: set[str], follow_ups: Mapping[str, Mapping[str, Any]]) -> None:
    """Write the devices of the messages in `wanted`, each with the follow-up its answer led to."""
    device_store.settle(
        session,
        [
            replace(s, follow_up=follow_ups.get(unit_id(s.message_id, s.n), {}).get("follow_up"))
            for s in folded.settled
            if s.message_id in wanted
        ],
    )
