from __future__ import annotations


def test_healthz(client):
    assert client.get("/healthz").get_json() == {"status": "ok"}


def test_readyz_when_database_and_broker_answer(client):
    answer = client.get("/readyz")
    assert answer.status_code == 200
    assert answer.get_json()["checks"] == {"database": True, "broker": True}
