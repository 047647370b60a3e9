"""A subscriber's preferences over HTTP, and the project settings they are read against."""

from __future__ import annotations

import pytest

from tests.conftest import ADMIN_KEY, bearer

PREFERENCES = {
    "channels": {"sms": False},
    "categories": {"marketing": {"email": False}},
    "quiet_hours": {"start": "22:00", "end": "08:00"},
}


def test_preferences_start_empty_and_are_replaced_whole(project):
    project.call("PUT", "/v1/subscribers/u1", {})
    empty = project.call("GET", "/v1/subscribers/u1/preferences")
    assert empty.get_json() == {"channels": {}, "categories": {}, "quiet_hours": None}
    saved = project.call("PUT", "/v1/subscribers/u1/preferences", PREFERENCES)
    assert saved.status_code == 200
    assert saved.get_json() == PREFERENCES
    assert project.call("GET", "/v1/subscribers/u1/preferences").get_json() == PREFERENCES
    project.call("PUT", "/v1/subscribers/u1/preferences", {"channels": {"push": False}})
    assert project.call("GET", "/v1/subscribers/u1/preferences").get_json() == {
        "channels": {"push": False},
        "categories": {},
        "quiet_hours": None,
    }


def test_preferences_of_an_unknown_subscriber_are_404(project):
    assert project.call("GET", "/v1/subscribers/nobody/preferences").status_code == 404
    assert project.call("PUT", "/v1/subscribers/nobody/preferences", PREFERENCES).status_code == 404


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        (
            {"channels": {"fax": False}},
            {"channels": {"fax": {"key": ["Must be one of: email, sms, push, webhook, in_app."]}}},
        ),
        ({"channels": {"sms": "maybe"}}, {"channels": {"sms": {"value": ["Not a valid boolean."]}}}),
        (
            {"categories": {"Marketing!": {"email": False}}},
            {"categories": {"Marketing!": {"key": ["Use 1 to 64 of a-z, 0-9, _ . and -."]}}},
        ),
        (
            {"quiet_hours": {"start": "25:00", "end": "08:00"}},
            {"quiet_hours": {"start": ["Use HH:MM, 00:00 to 23:59."]}},
        ),
        (
            {"quiet_hours": {"start": "08:00", "end": "08:00"}},
            {"quiet_hours": {"end": ["start and end must differ."]}},
        ),
    ],
)
def test_bad_preferences_are_422_and_change_nothing(project, body, errors):
    project.call("PUT", "/v1/subscribers/u1", {})
    answer = project.call("PUT", "/v1/subscribers/u1/preferences", body)
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"] == errors
    assert project.call("GET", "/v1/subscribers/u1/preferences").get_json()["channels"] == {}


SETTINGS = {
    "required_categories": ["security"],
    "category_defaults": {"marketing": {"sms": False}},
    "quiet_hours": {"start": "21:30", "end": "07:00"},
}


UNTRACKED = {"opens": False, "clicks": False, "transactional": True}
# What a project's settings hold when they leave them out: the deployment's quotas, reset at
# UTC midnight, and no sender of its own yet.
LIMITS = {"daily_quota": {}, "daily_storage_bytes": {}, "quota_timezone": "UTC", "verified_senders": []}
# No category has a name of its own on the preference page until the project gives one.
NAMES = {"category_names": {}}


def test_project_settings_are_set_at_creation_and_replaced_by_patch(client):
    admin = bearer(ADMIN_KEY)
    created = client.post("/v1/admin/projects", json={"name": "S", "settings": SETTINGS}, headers=admin)
    assert created.status_code == 201
    assert created.get_json()["settings"] == {
        **SETTINGS,
        "tracking": UNTRACKED,
        "retention_days": 30,
        "webhook_allowed_networks": [],
        **LIMITS,
        **NAMES,
    }
    project_id = created.get_json()["id"]
    patched = client.patch(
        f"/v1/admin/projects/{project_id}",
        json={"settings": {"required_categories": ["billing"]}},
        headers=admin,
    )
    assert patched.get_json()["settings"] == {
        "required_categories": ["billing"],
        "category_defaults": {},
        "quiet_hours": None,
        "tracking": UNTRACKED,
        "retention_days": 30,
        "webhook_allowed_networks": [],
        **LIMITS,
        **NAMES,
    }
    plain = client.post("/v1/admin/projects", json={"name": "Plain"}, headers=admin).get_json()
    assert plain["settings"] == {
        "required_categories": [],
        "category_defaults": {},
        "quiet_hours": None,
        "tracking": UNTRACKED,
        "retention_days": 30,
        "webhook_allowed_networks": [],
        **LIMITS,
        **NAMES,
    }


def test_bad_project_settings_are_422(client):
    answer = client.post(
        "/v1/admin/projects",
        json={"name": "S", "settings": {"required_categories": ["Not OK"], "quiet_hours": {"start": "9"}}},
        headers=bearer(ADMIN_KEY),
    )
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"]["settings"] == {
        "required_categories": {"0": ["Use 1 to 64 of a-z, 0-9, _ . and -."]},
        "quiet_hours": {"start": ["Use HH:MM, 00:00 to 23:59."], "end": ["Missing data for required field."]},
    }


def test_webhook_allowed_networks_are_cidrs(client):
    answer = client.post(
        "/v1/admin/projects",
        json={"name": "S", "settings": {"webhook_allowed_networks": ["10.0.0.0/8", "10.0.0.1/8", "intranet"]}},
        headers=bearer(ADMIN_KEY),
    )
    assert answer.status_code == 422
    assert answer.get_json()["errors"]["json"]["settings"] == {
        "webhook_allowed_networks": {
            "1": ["10.0.0.1/8 has host bits set"],
            "2": ["'intranet' does not appear to be an IPv4 or IPv6 network"],
        }
    }


def test_openapi_documents_the_audience_routes_and_project_settings(client):
    spec = client.get("/openapi.json").get_json()
    assert {
        "/v1/subscribers/{external_id}",
        "/v1/subscribers/import",
        "/v1/subscribers/{external_id}/preferences",
        "/v1/suppressions",
        "/v1/suppressions/{channel}/{address}",
        "/v1/templates",
        "/v1/templates/{key}",
        "/v1/templates/{key}/preview",
    } <= set(spec["paths"])
    settings = spec["components"]["schemas"]["ProjectSettings"]["properties"]
    assert set(settings) == {
        "required_categories",
        "category_defaults",
        "quiet_hours",
        "category_names",
        "tracking",
        "retention_days",
        "webhook_allowed_networks",
        "daily_quota",
        "daily_storage_bytes",
        "quota_timezone",
        "messages_per_min",
        "transactional_per_min",
        "verified_senders",
    }
