"""The shared counters' Redis fields: any label value comes back out of `/metrics` as it
went in, and a field that does not decode cleanly is left out instead of breaking the scrape."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.observability.counters import HASH, Tally, increment, labels_text, parse_labels, well_formed

AWKWARD = ['say "hi"', "back\\slash", "new\nline", "a|b", "a,b=c", "100%", "/v1/x/<id>", "ünï"]


@pytest.fixture
def redis(client):
    """The shared hash, rid afterwards of every series this module's awkward values made."""
    redis = client.application.extensions["tidings"].redis
    yield redis
    made = [
        field for field in redis.hkeys(HASH) if parse_labels(field.decode().split("|")[1]).get("provider") in AWKWARD
    ]
    if made:
        redis.hdel(HASH, *made)


def scrape(client) -> dict:
    answer = client.get("/metrics")
    assert answer.status_code == 200
    return {family.name: family for family in text_string_to_metric_families(answer.get_data(as_text=True))}


@pytest.mark.parametrize("value", AWKWARD)
def test_a_label_value_round_trips_through_its_field(value):
    text = labels_text({"provider": value, "outcome": "x"})
    assert well_formed(text)
    assert parse_labels(text) == {"provider": value, "outcome": "x"}


def test_plain_values_are_written_as_they_are():
    labels = {"method": "GET", "route": "/v1/messages/<message_id>", "status": "202"}
    assert labels_text(labels) == "method=GET,route=/v1/messages/<message_id>,status=202"


def test_awkward_label_values_are_exported_escaped_and_read_back(client, redis):
    for value in AWKWARD:
        increment(redis, "inbound_events", provider=value, outcome="awkward")
        tally = Tally()
        tally.observe("provider_call_seconds", [0.2], provider=value)
        tally.flush(redis)
    families = scrape(client)
    counted = {
        s.labels["provider"] for s in families["tidings_inbound_events"].samples if s.labels.get("outcome") == "awkward"
    }
    assert counted == set(AWKWARD)
    timed = {s.labels["provider"] for s in families["tidings_provider_call_seconds"].samples}
    assert set(AWKWARD) <= timed


def test_fields_written_unquoted_are_left_out_and_the_rest_exported(client, redis):
    """What the counters held before values were quoted: a method `A|B` or `A,B=C` ran into
    the separators, and a scrape that read them failed for good."""
    broken = [
        "http_requests|method=A|B,route=<unmatched>,status=405",
        "http_requests|method=A,B=C,route=<unmatched>,status=405",
        "http_requests|method=A=B,route=<unmatched>,status=405",
        "http_request_seconds|method=A|B,route=<unmatched>|0.005",
        "http_request_seconds|method=GET,route=<unmatched>|not-a-bucket",
    ]
    try:
        for field in broken:
            redis.hincrby(HASH, field, 1)
        increment(redis, "http_requests", method="GET", route="<unmatched>", status="418")
        families = scrape(client)
        requests = families["tidings_http_requests"].samples
        assert any(s.labels["status"] == "418" for s in requests)
        assert not {"A", "A=B"} & {s.labels["method"] for s in requests}
        histogram = families["tidings_http_request_seconds"].samples
        assert "A" not in {s.labels["method"] for s in histogram}
    finally:
        redis.hdel(HASH, *broken)


def test_a_series_whose_labels_differ_from_its_family_s_is_exported_as_it_is(client, redis):
    """A label added in a later release leaves the older series without it: both are exported."""
    field = f"http_requests|{labels_text({'method': 'GET', 'provider': AWKWARD[0]})}"
    redis.hincrby(HASH, field, 1)
    increment(redis, "http_requests", method="GET", route="<unmatched>", status="418")
    labels = [s.labels for s in scrape(client)["tidings_http_requests"].samples]
    assert {"method": "GET", "provider": AWKWARD[0]} in labels
    assert any(label.get("status") == "418" for label in labels)
