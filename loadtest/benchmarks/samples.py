"""What the micro-benchmarks work on: one realistic email template, its recipients, and
the messages the worker hands the adapters after rendering it.

Realistic means the sizes and shapes production sees (an order confirmation with a loop,
filters, autoescaped html of 1.4 KB, per-recipient data), so a figure per message
here is close to what the pipeline pays per message.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.content.rendering import render_version
from providers.base import Outbound

BATCH = 100  # messages per payload benchmark: one call of a batch API, or 100 calls of the others

SUBJECT = "Your order {{ order.number }} is confirmed, {{ name }}"
TEXT = """Hello {{ name }},

thank you for your order {{ order.number }} of {{ order.placed }}.
{% for item in order['items'] %}
- {{ item.quantity }} x {{ item.title }}: {{ item.price | round(2) }} {{ order.currency }}
{%- endfor %}

Total: {{ order['items'] | sum(attribute='price') | round(2) }} {{ order.currency }}
{% if order.gift %}A gift note goes with it: "{{ order.gift | truncate(80) }}"{% endif %}

We will write again when it ships to {{ order.city | title }}.
"""
HTML = """{% set total = order['items'] | sum(attribute='price') | round(2) %}<!doctype html>
<html><body style="font-family: sans-serif; max-width: 600px; margin: auto">
<h1>Thank you, {{ name }}!</h1>
<p>Your order <strong>{{ order.number }}</strong> of {{ order.placed }} is confirmed.</p>
<table width="100%" cellpadding="6" style="border-collapse: collapse">
  <tr><th align="left">Item</th><th align="right">Qty</th><th align="right">Price</th></tr>
  {% for item in order['items'] %}
  <tr style="border-top: 1px solid #ddd">
    <td><a href="https://shop.example.com/p/{{ item.sku }}">{{ item.title }}</a></td>
    <td align="right">{{ item.quantity }}</td>
    <td align="right">{{ item.price | round(2) }} {{ order.currency }}</td>
  </tr>
  {% endfor %}
  <tr><td colspan="2"><strong>Total</strong></td>
      <td align="right"><strong>{{ total }} {{ order.currency }}</strong></td></tr>
</table>
{% if order.gift %}<p>Gift note: <em>{{ order.gift | truncate(80) }}</em></p>{% endif %}
<p>We will write again when it ships to {{ order.city | title }}.</p>
<p style="color: #888; font-size: 12px">Shop Example · 1 Market Street · You get this because you ordered.</p>
</body></html>
"""


@dataclass(frozen=True)
class TemplateRow:
    """A template version as prepare reads it (app.content.rendering.TemplateVersion)."""

    project_id: str = "bench"
    key: str = "order-confirmed"
    version: int = 3
    default_locale: str = "en"
    variants: dict[str, Any] = field(default_factory=lambda: {"en": {"subject": SUBJECT, "text": TEXT, "html": HTML}})
    created_at: datetime = datetime(2025, 1, 1, tzinfo=UTC)


TEMPLATE = TemplateRow()


@dataclass(frozen=True)
class Person:
    """One recipient: an address and the data their message is rendered with."""

    name: str
    email: str
    data: dict[str, Any]


def person(n: int) -> Person:
    """The n-th recipient, with an order of three items (one title needing html escaping)."""
    name = f"Ada Lovelace {n}"
    order = {
        "number": f"A-{10_000 + n}",
        "placed": "3 March 2025",
        "currency": "EUR",
        "city": "london",
        "gift": "Happy birthday! With love from all of us & the cat." if n % 3 == 0 else None,
        "items": [
            {"sku": f"sku-{n}-1", "title": "Analytical Engine <mini>", "quantity": 1, "price": 149.9},
            {"sku": f"sku-{n}-2", "title": "Punched cards, box of 500", "quantity": 2, "price": 25.0},
            {"sku": f"sku-{n}-3", "title": "Notes on the Engine (paperback)", "quantity": 1, "price": 18.0 + n % 7},
        ],
    }
    return Person(name, f"ada.lovelace+{n}@example.com", {"name": name, "order": order})


def send_body() -> dict[str, Any]:
    """A `POST /v1/messages` body as a shop sends it (the example of API.md, to an address)."""
    recipient = person(1)
    return {
        "channel": "email",
        "to": {"email": recipient.email},
        "template": TEMPLATE.key,
        "data": recipient.data,
        "locale": "en",
        "category": "orders",
        "priority": "transactional",
        "metadata": {"order": recipient.data["order"]["number"], "shop": "example"},
    }


def emails(count: int = BATCH) -> list[Outbound]:
    """Rendered order confirmations, as deliver hands them to an email adapter."""
    messages = []
    for n in range(count):
        recipient = person(n)
        _, rendered = render_version(TEMPLATE, ["en"], recipient.data)
        messages.append(
            Outbound(
                str(uuid.uuid4()),
                "email",
                recipient.email,
                rendered["subject"],
                rendered["text"],
                rendered["html"],
                headers={"List-Unsubscribe": f"<https://shop.example.com/unsubscribe/{n}>"},
            )
        )
    return messages


def sms(count: int = BATCH) -> list[Outbound]:
    return [
        Outbound(str(uuid.uuid4()), "sms", f"+4915112{n:05d}", text=f"Your order A-{10_000 + n} is confirmed.")
        for n in range(count)
    ]


def pushes(count: int = BATCH) -> list[Outbound]:
    return [
        Outbound(
            str(uuid.uuid4()),
            "push",
            f"fcm-token-{n:04d}-" + "x" * 140,  # FCM registration tokens are ~160 characters
            subject="Order confirmed",
            text=f"Your order A-{10_000 + n} is on its way soon.",
            data={"order": f"A-{10_000 + n}", "screen": "orders", "badge": 1},
        )
        for n in range(count)
    ]


def webhooks(count: int = BATCH) -> list[Outbound]:
    return [
        Outbound(
            str(uuid.uuid4()),
            "webhook",
            "https://hooks.example.com/orders",
            data={"event": "order.confirmed", "order": person(n).data["order"]},
        )
        for n in range(count)
    ]
