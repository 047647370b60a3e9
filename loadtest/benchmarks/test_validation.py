"""Request validation: what the API spends on a body before it touches the database."""

from __future__ import annotations

from samples import person, send_body

from app.enums import Channel
from app.schemas.core import SendSchema
from app.services.batches import check_recipients


def test_send_validation(benchmark):
    """`POST /v1/messages`: the schema the endpoint loads (flask-smorest builds it once)."""
    schema, body = SendSchema(), send_body()
    loaded = benchmark(schema.load, body)
    assert loaded["to"] == body["to"]


def test_batch_validation_500(benchmark):
    """`POST /v1/messages/batch`: the recipient rows of a 500-recipient batch."""
    rows = [{"email": p.email, "data": p.data} for p in map(person, range(500))]
    benchmark.extra_info["items"] = len(rows)
    valid, rejected = benchmark(check_recipients, Channel.EMAIL, rows)
    assert (len(valid), rejected) == (500, [])
