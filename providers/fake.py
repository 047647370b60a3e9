"""The `fake` provider: a small JSON batch API, for load tests and fault tests.

It speaks to `FAKE_PROVIDER_URL` the way a real batch provider would: one POST per batch,
each message keyed by our message id (the provider's idempotency key), an answer per
message, 429 with Retry-After, 5xx.

    POST {url}/messages  {"messages": [{"id", "channel", "to", "subject", "text", "html"}]}
    200 {"results": [{"id": "...", "status": "accepted" | "rejected", "provider_id", "error"}]}

`fake2` is the same adapter under a second name with its own URL (`FAKE2_PROVIDER_URL`),
so failover from one provider to another can be tested and load-tested on one machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

from providers.base import HttpClient, Outbound, Outcome, SendResult


class FakeProvider:
    name: ClassVar[str] = "fake"
    channels: ClassVar[frozenset[str]] = frozenset({"email", "sms", "push", "webhook"})
    max_batch: ClassVar[int] = 100
    # The prefix of its settings: {prefix}_PROVIDER_URL, _TIMEOUT, _IDEMPOTENT.
    prefix: ClassVar[str] = "FAKE"
    account_settings: ClassVar[tuple[str, ...]] = ("FAKE_PROVIDER_URL",)

    def __init__(self, url: str, timeout: float = 10.0, idempotent: bool = True):
        self.client = HttpClient(url, timeout=timeout)
        # Fault tests play both kinds of provider: one that de-duplicates on our id, one that does not.
        self.idempotent = idempotent

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        url = env.get(f"{cls.prefix}_PROVIDER_URL", "").strip()
        if not url:
            raise ValueError(f"{cls.prefix}_PROVIDER_URL is not set")
        return cls(
            url,
            timeout=float(env.get(f"{cls.prefix}_PROVIDER_TIMEOUT", "10")),
            idempotent=env.get(f"{cls.prefix}_PROVIDER_IDEMPOTENT", "true").lower() != "false",
        )

    def send(self, batch: Sequence[Outbound]) -> list[SendResult]:
        answer = self.client.post_json("/messages", payload(batch))
        by_id = {item["id"]: item for item in (answer or {}).get("results", [])}
        return [self._result(m.message_id, by_id.get(m.message_id)) for m in batch]

    @staticmethod
    def _result(message_id: str, item: Mapping | None) -> SendResult:
        if item is None:
            return SendResult(message_id, Outcome.TRANSIENT, error="missing from the provider's answer")
        if item.get("status") == "accepted":
            return SendResult(message_id, Outcome.SENT, provider_message_id=item.get("provider_id"))
        return SendResult(message_id, Outcome.PERMANENT, error=item.get("error") or "rejected")


class SecondFakeProvider(FakeProvider):
    """`fake` under a second name, on its own URL: the other end of a failover."""

    name: ClassVar[str] = "fake2"
    prefix: ClassVar[str] = "FAKE2"
    account_settings: ClassVar[tuple[str, ...]] = ("FAKE2_PROVIDER_URL",)


def payload(batch: Sequence[Outbound]) -> dict[str, Any]:
    """The request body for a batch; apart from sending, so benchmarks can time building alone."""
    return {
        "messages": [
            {"id": m.message_id, "channel": m.channel, "to": m.to, "subject": m.subject, "text": m.text, "html": m.html}
            for m in batch
        ]
    }
