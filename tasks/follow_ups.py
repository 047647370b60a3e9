"""What a provider's refusal asks of us beyond failing the message.

An inactive recipient, a hard bounce or an SMS STOP: suppress the address for the project,
so prepare never routes it again. A push token the provider no longer knows: remove it from
its subscriber. Both are written inside deliver's finalise transaction, one statement each
for the whole batch, and the failed event says which one was applied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.orm import Session

from app.delivery import store
from app.enums import Channel, SuppressionReason
from app.services.suppressions import NewSuppression, suppress_all
from providers.base import Outcome, SendResult

SUPPRESSED = "suppressed"
TOKEN_REMOVED = "token_removed"


def apply(
    session: Session, results: Sequence[SendResult], rows: Mapping[str, store.Claimed]
) -> dict[str, dict[str, Any]]:
    """Apply every follow-up the results ask for; per message, what the failed event should add."""
    suppressions: list[NewSuppression] = []
    tokens: list[tuple[str, str, str]] = []
    applied: dict[str, dict[str, Any]] = {}
    for result in results:
        row = rows.get(result.message_id)
        if row is None or result.outcome is not Outcome.PERMANENT:
            continue
        if result.suppress:
            reason = reason_for(result.suppress_reason)
            suppressions.append(NewSuppression(row.project_id, Channel(row.channel), row.to_address, reason))
            applied[row.id] = {"follow_up": SUPPRESSED, "suppression_reason": reason.value}
        elif result.invalid_token and row.subscriber_id is not None:
            # A message sent to a raw device token has no subscriber to take it from.
            tokens.append((row.project_id, row.subscriber_id, row.to_address))
            applied[row.id] = {"follow_up": TOKEN_REMOVED}
    suppress_all(session, suppressions)
    store.remove_push_tokens(session, tokens)
    return applied


def reason_for(name: str | None) -> SuppressionReason:
    """The adapter's reason if it is one of ours, a bounce otherwise."""
    try:
        return SuppressionReason(name or SuppressionReason.BOUNCE)
    except ValueError:
        return SuppressionReason.BOUNCE
