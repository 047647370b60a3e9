"""The `simulator` provider: documented recipients that answer as a real provider would.

Integrations rehearse failure with it, with a test key or a live one, and nothing reaches
a real provider: prepare routes every address of the simulator's own (table below) here,
whatever the key. Its answers are ordinary results: a temporary failure retries on the real
ladder, a permanent one fails and suppresses the address, a rate limit pauses the provider
(this one: the simulator, for the recipient's project alone, as `endpoint_per_message` makes
each project's messages an account of their own), and what a real provider reports later by
status webhook (delivered, bounced, complained; opens and clicks) comes back as `Report`s,
which the engine applies through the same code as those webhooks.

Every address is reserved so it can never reach anyone: email and webhook hosts under
`.invalid` (RFC 2606), SMS numbers in NANP's fictional 555-0100..0199 block (any area code),
push tokens with the `simulator:` prefix. An address of that namespace naming no scenario
of its channel fails permanently with the reason, so a typo never leaves for a provider.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import ClassVar, Self

import redis

from providers.base import (
    Outbound,
    Outcome,
    PermanentError,
    ProviderError,
    RateLimited,
    Report,
    SendResult,
    SuppressRecipient,
    TransientError,
    required,
)

NAME = "simulator"
DOMAIN = "simulator.tidings.invalid"
# The link a simulated click follows: a message's own links are the tracker's to rewrite.
CLICKED_URL = f"https://{DOMAIN}/clicked"
# How long a rate-limited recipient's 429 pauses the simulator.
RATE_LIMIT_SECONDS = 1.0
# How long the simulator remembers that it answered a message 429: longer than any pause.
RATE_LIMIT_MEMORY_SECONDS = 86_400


class Scenario(StrEnum):
    DELIVERED = "delivered"
    TEMPORARY_FAILURE = "temporary-failure"
    PERMANENT_FAILURE = "permanent-failure"
    RATE_LIMITED = "rate-limited"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    OPENED = "opened"
    CLICKED = "clicked"


# What each channel's simulated recipients may ask for: the first four everywhere; bounces,
# complaints, opens and clicks are email's news.
EVERY_CHANNEL = frozenset(
    {Scenario.DELIVERED, Scenario.TEMPORARY_FAILURE, Scenario.PERMANENT_FAILURE, Scenario.RATE_LIMITED}
)
SCENARIOS: Mapping[str, frozenset[Scenario]] = {
    "email": frozenset(Scenario),
    "sms": EVERY_CHANNEL,
    "push": EVERY_CHANNEL,
    "webhook": EVERY_CHANNEL,
}

# Each channel's namespace, and where in an address the scenario's name is. A `+tag`, a
# `:suffix` or a path after the name makes another address of the same scenario, so a
# suppressed one never stops a rehearsal: `permanent-failure+run7@simulator.tidings.invalid`.
PATTERNS: Mapping[str, re.Pattern[str]] = {
    "email": re.compile(rf"(?P<name>[^@+]*)(?:\+[^@]*)?@{re.escape(DOMAIN)}"),
    "sms": re.compile(r"\+1[2-9][0-9]{2}55501(?P<digit>[0-9])[0-9]"),
    "push": re.compile(r"simulator:(?P<name>[^:]*)(?::.*)?", re.DOTALL),
    # A URL's scheme and host are case-insensitive, its path is not.
    "webhook": re.compile(rf"(?i:https?://{re.escape(DOMAIN)})(?::[0-9]+)?/(?P<name>[^/?#]*)(?:[/?#].*)?", re.DOTALL),
}
# An SMS number's tens digit names its scenario: 555-0100..0109 delivered, 0110..0119 a temporary failure, …
SMS_DIGITS = {
    "0": Scenario.DELIVERED,
    "1": Scenario.TEMPORARY_FAILURE,
    "2": Scenario.PERMANENT_FAILURE,
    "3": Scenario.RATE_LIMITED,
}

# What the simulator reports after sending, in order.
REPORTS: Mapping[Scenario, tuple[Report, ...]] = {
    Scenario.DELIVERED: (Report("delivered"),),
    Scenario.RATE_LIMITED: (Report("delivered"),),
    Scenario.BOUNCED: (Report("bounced"),),
    Scenario.COMPLAINED: (Report("delivered"), Report("complained")),
    Scenario.OPENED: (Report("delivered"), Report("opened")),
    Scenario.CLICKED: (Report("delivered"), Report("opened"), Report("clicked", CLICKED_URL)),
}


def simulates(channel: str, address: str) -> bool:
    """Whether `address` (normalised) is the simulator's: prepare routes it nowhere else."""
    return name_in(channel, address) is not None


def name_in(channel: str, address: str) -> str | None:
    """The scenario name an address of the simulator's namespace gives (maybe none it
    knows); None for an address outside it."""
    pattern = PATTERNS.get(channel)
    found = pattern.fullmatch(address) if pattern is not None else None
    if found is None:
        return None
    if channel == "sms":
        scenario = SMS_DIGITS.get(found["digit"])
        return scenario.value if scenario is not None else ""
    return found["name"]


def scenario_of(channel: str, address: str) -> Scenario | None:
    """The scenario a simulated recipient asks for on its channel; None when it names none."""
    name = name_in(channel, address)
    if name not in {s.value for s in SCENARIOS.get(channel, ())}:
        return None
    return Scenario(name)


class SimulatorProvider:
    name: ClassVar[str] = NAME
    channels: ClassVar[frozenset[str]] = frozenset(SCENARIOS)
    max_batch: ClassVar[int] = 500
    idempotent: bool = True  # it sends nothing, so sending again is harmless
    attachments: ClassVar[bool] = True  # taken and dropped, like the rest of the message
    # Each recipient's fate is its own scenario, chosen by the tenant: failures say nothing
    # about the simulator, and must never open its circuit.
    endpoint_per_message: ClassVar[bool] = True
    chainable: ClassVar[bool] = False  # prepare routes its recipients here, never a chain
    account_settings: ClassVar[tuple[str, ...]] = ()

    def __init__(self, memory: redis.Redis):
        # Which messages were answered 429 already: shared by every worker, as a real
        # provider's own state is, so each rate-limited recipient is refused exactly once.
        self.memory = memory

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        return cls(redis.Redis.from_url(required(env, "REDIS_URL"), socket_timeout=0.5, socket_connect_timeout=0.5))

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        return [self.answer(message) for message in batch]

    def answer(self, message: Outbound) -> SendResult:
        """What a provider would answer this recipient, by the scenario it names."""
        scenario = scenario_of(message.channel, message.to)
        error: ProviderError
        if scenario is None:
            error = PermanentError(f"{message.to!r} is not a simulated {message.channel} recipient (see the README)")
            return SendResult.from_error(message.message_id, error)
        if scenario is Scenario.TEMPORARY_FAILURE:
            error = TransientError("simulated temporary failure (as a provider's 5xx)")
            return SendResult.from_error(message.message_id, error)
        if scenario is Scenario.PERMANENT_FAILURE:
            error = SuppressRecipient("simulated permanent failure (a hard bounce)")
            return SendResult.from_error(message.message_id, error)
        if scenario is Scenario.RATE_LIMITED and self.first_time(message.message_id):
            error = RateLimited(f"simulated rate limit: retry after {RATE_LIMIT_SECONDS:g} s", RATE_LIMIT_SECONDS)
            return SendResult.from_error(message.message_id, error)
        return SendResult(
            message.message_id,
            Outcome.SENT,
            provider_message_id=f"sim-{uuid.uuid4().hex}",
            reports=REPORTS[scenario],
        )

    def first_time(self, message_id: str) -> bool:
        key = f"tidings:simulator:rate-limited:{message_id}"
        return bool(self.memory.set(key, 1, nx=True, ex=RATE_LIMIT_MEMORY_SECONDS))
