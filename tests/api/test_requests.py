"""The request counters: whatever method or path a client sends, `/metrics` stays readable
and its series stay the few we chose."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import bearer

REQUESTS = "tidings_http_requests_total"
SECONDS = "tidings_http_request_seconds_count"


def samples(client, name: str) -> list:
    answer = client.get("/metrics")
    assert answer.status_code == 200
    families = text_string_to_metric_families(answer.get_data(as_text=True))
    return [sample for family in families for sample in family.samples if sample.name == name]


def counted(client, name: str, **labels: str) -> float:
    return sum(s.value for s in samples(client, name) if labels.items() <= s.labels.items())


def test_a_method_outside_the_standard_set_is_counted_as_other(client, project):
    """Routing refuses the method before a route is matched, so the route is `<unmatched>` too."""
    refused = {"route": "<unmatched>", "status": "405"}
    before = counted(client, REQUESTS, method="other", **refused)
    seconds_before = counted(client, SECONDS, method="other", route="<unmatched>")
    for method in ("A|B", "BREW"):
        answer = client.open("/v1/messages/some-id", method=method, headers=bearer(project.live_key))
        assert answer.status_code == 405
        assert answer.get_json()["code"] == 405
    assert counted(client, REQUESTS, method="other", **refused) == before + 2
    assert counted(client, SECONDS, method="other", route="<unmatched>") == seconds_before + 2
    methods = {s.labels["method"] for s in samples(client, REQUESTS)}
    assert methods <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}


def test_paths_no_route_matches_are_one_series(client):
    before = counted(client, REQUESTS, method="GET", route="<unmatched>", status="404")
    for n in range(3):
        assert client.get(f"/no-such-route-{n}").status_code == 404
    assert counted(client, REQUESTS, method="GET", route="<unmatched>", status="404") == before + 3
    assert not any("no-such-route" in s.labels["route"] for s in samples(client, REQUESTS))
