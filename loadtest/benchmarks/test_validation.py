"""Request validation: what the API spends on a body before it touches the database."""

from __future__ import annotations

from samples import send_body

from app.schemas import SendSchema


def test_send_validation(benchmark):
    """`POST /v1/messages`: the schema the endpoint loads (flask-smorest builds it once)."""
    schema, body = SendSchema(), send_body()
    loaded = benchmark(schema.load, body)
    assert loaded["to"] == body["to"]
