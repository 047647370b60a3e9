"""The in-app inbox: prepare stores in_app messages for their subscriber; backends read it
with the project key, browsers with a subscriber token that opens that inbox only."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from app.content.tokens import SUBSCRIBER_TOKEN_PREFIX, Purpose, mint
from tests.conftest import ADMIN_KEY, bearer, create_project
from tests.sse import SseClient

pytestmark = pytest.mark.usefixtures("worker")


def in_app(title: str, to: str = "u1", **extra) -> dict:
    return {
        "channel": "in_app",
        "to": {"subscriber_id": to},
        "content": {"title": title, "text": f"{title} body"},
        **extra,
    }


@pytest.fixture
def users(project):
    for user in ("u1", "u2"):
        assert project.call("PUT", f"/v1/subscribers/{user}", {"email": f"{user}@example.com"}).status_code == 201
    return project


def deliver(project, body: dict) -> str:
    message_id = project.send(body).get_json()["id"]
    assert project.wait_for(message_id)["status"] == "sent"
    return message_id


def token_for(project, subscriber: str = "u1", ttl_seconds: int = 600) -> str:
    answer = project.call("POST", f"/v1/subscribers/{subscriber}/token", {"ttl_seconds": ttl_seconds})
    assert answer.status_code == 200
    token = answer.get_json()["token"]
    assert token.startswith(SUBSCRIBER_TOKEN_PREFIX)
    return token


def as_browser(project, method: str, path: str, token: str, body=None):
    return project.client.open(path, method=method, json=body, headers={"Authorization": f"Bearer {token}"})


def test_an_in_app_message_lands_in_the_inbox_without_a_provider(users):
    message_id = deliver(users, in_app("Welcome", category="account"))
    message = users.get(message_id).get_json()
    assert (message["provider"], message["attempts"]) == ("inbox", 0)
    assert [e["type"] for e in message["events"]] == ["accepted", "ready", "sent"]
    [item] = users.call("GET", "/v1/subscribers/u1/inbox").get_json()["items"]
    assert (item["id"], item["status"], item["title"], item["body"], item["category"]) == (
        message_id,
        "unread",
        "Welcome",
        "Welcome body",
        "account",
    )
    assert users.call("GET", "/v1/subscribers/u1/inbox/count").get_json() == {"unread": 1, "total": 1}
    assert users.call("GET", "/v1/subscribers/u2/inbox").get_json()["items"] == []


def test_templates_render_in_app_title_body_and_data(users):
    template = {
        "key": "badge",
        "channel": "in_app",
        "title": "Hi {{ name }}",
        "body": "You earned {{ n }}",
        "data": {"url": "/b/{{ n }}"},
    }
    assert users.call("POST", "/v1/templates", template).status_code == 201
    deliver(
        users,
        {"channel": "in_app", "to": {"subscriber_id": "u1"}, "template": "badge", "data": {"name": "Ada", "n": 3}},
    )
    [item] = users.call("GET", "/v1/subscribers/u1/inbox").get_json()["items"]
    assert (item["title"], item["body"], item["data"]) == ("Hi Ada", "You earned 3", {"url": "/b/3"})


def test_unread_first_newest_first_paged_by_cursor(users):
    first, second, third = (deliver(users, in_app(f"n{n}")) for n in range(3))
    assert users.call("POST", f"/v1/subscribers/u1/inbox/{third}/read").get_json()["status"] == "read"
    order, cursor = [], None
    for _ in range(4):
        page = users.call(
            "GET", "/v1/subscribers/u1/inbox?limit=1" + (f"&cursor={cursor}" if cursor else "")
        ).get_json()
        order += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert order == [second, first, third]


def test_read_all_and_archive(users):
    first, second = deliver(users, in_app("a")), deliver(users, in_app("b"))
    assert users.call("POST", "/v1/subscribers/u1/inbox/read-all").get_json() == {"changed": 2, "unread": 0, "total": 2}
    archived = users.call("POST", f"/v1/subscribers/u1/inbox/{first}/archive").get_json()
    assert archived["status"] == "archived" and archived["archived_at"] is not None
    assert [i["id"] for i in users.call("GET", "/v1/subscribers/u1/inbox").get_json()["items"]] == [second]
    assert [i["id"] for i in users.call("GET", "/v1/subscribers/u1/inbox?status=archived").get_json()["items"]] == [
        first
    ]
    again = users.call("POST", f"/v1/subscribers/u1/inbox/{first}/archive")
    assert again.status_code == 200  # twice is harmless


def test_a_subscriber_token_opens_its_own_inbox_only(users, client):
    deliver(users, in_app("mine"))
    token = token_for(users, "u1")
    [item] = as_browser(users, "GET", "/v1/subscribers/u1/inbox", token).get_json()["items"]
    assert as_browser(users, "POST", f"/v1/subscribers/u1/inbox/{item['id']}/read", token).status_code == 200
    assert as_browser(users, "GET", "/v1/subscribers/u1/inbox/count", token).get_json()["unread"] == 0
    for method, path in (
        ("GET", "/v1/subscribers/u2/inbox"),
        ("GET", "/v1/subscribers/u2/inbox/count"),
        ("POST", "/v1/subscribers/u2/inbox/read-all"),
    ):
        assert as_browser(users, method, path, token).status_code == 403
    for method, path in (
        ("GET", "/v1/subscribers/u1"),
        ("GET", "/v1/messages"),
        ("GET", "/v1/events"),
        ("POST", "/v1/messages"),
    ):
        assert as_browser(users, method, path, token, {} if method == "POST" else None).status_code == 401
    other = create_project(client)  # another project with a subscriber of the same id
    other.call("PUT", "/v1/subscribers/u1", {"email": "other@example.com"})
    deliver(other, in_app("theirs"))
    titles = [i["title"] for i in as_browser(other, "GET", "/v1/subscribers/u1/inbox", token).get_json()["items"]]
    assert titles == ["mine"]


@pytest.mark.parametrize(
    "make",
    [
        lambda project: SUBSCRIBER_TOKEN_PREFIX + "forged.token",
        lambda project: SUBSCRIBER_TOKEN_PREFIX + mint(Purpose.SUBSCRIBER, {"p": project.id, "s": "u1"}, lifetime=-1),
        lambda project: SUBSCRIBER_TOKEN_PREFIX + mint(Purpose.OPEN, {"p": project.id, "s": "u1"}),
        lambda project: SUBSCRIBER_TOKEN_PREFIX + mint(Purpose.SUBSCRIBER, {"p": "no-such-project", "s": "u1"}),
    ],
    ids=["forged", "expired", "another-purpose", "unknown-project"],
)
def test_bad_subscriber_tokens_are_401(users, make):
    assert as_browser(users, "GET", "/v1/subscribers/u1/inbox", make(users)).status_code == 401


def test_bad_inbox_input_is_4xx(users):
    assert users.call("POST", "/v1/subscribers/u1/token", {"ttl_seconds": 5}).status_code == 422
    assert users.call("POST", "/v1/subscribers/nobody/token", {}).status_code == 404
    assert users.call("GET", "/v1/subscribers/u1/inbox?status=deleted").status_code == 422
    assert users.call("GET", "/v1/subscribers/u1/inbox?cursor=junk").status_code == 400
    assert users.call("GET", "/v1/subscribers/nobody/inbox").status_code == 404
    assert users.call("POST", "/v1/subscribers/u1/inbox/not-an-id/read").status_code == 404


def test_an_in_app_message_to_an_unknown_subscriber_fails(users):
    message = users.wait_for(users.send(in_app("lost", to="nobody")).get_json()["id"])
    assert message["status"] == "failed"


def test_browsers_may_call_from_any_origin(users, client):
    preflight = client.options("/v1/subscribers/u1/inbox", headers={"Origin": "https://app.example.com"})
    assert preflight.status_code == 200
    assert preflight.headers["Access-Control-Allow-Origin"] == "*"
    assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]


def test_erasure_empties_the_inbox(users, engine):
    deliver(users, in_app("private"))
    assert users.call("DELETE", "/v1/subscribers/u1").status_code == 204
    with engine.connect() as connection:
        left = connection.execute(text("SELECT count(*) FROM inbox_items WHERE project_id = :p"), {"p": users.id})
        assert left.scalar() == 0


def test_the_inbox_stream_pushes_new_items_and_counts(users, live_api):
    token = token_for(users, "u1")
    client = SseClient(live_api, f"/v1/inbox/stream?token={token}")
    assert client.status == 200
    try:
        assert client.next_data()["data"] == {"unread": 0, "total": 0}
        message_id = deliver(users, in_app("live"))
        pushed = client.next_data()
        assert (pushed["event"], pushed["id"], pushed["data"]["title"]) == ("item", message_id, "live")
        assert client.next_data()["data"] == {"unread": 1, "total": 1}
        users.call("POST", f"/v1/subscribers/u1/inbox/{message_id}/read")
        assert client.next_data()["data"] == {"unread": 0, "total": 1}
        deliver(users, in_app("for u2", to="u2"))
        assert client.next(timeout=1.5) == {"comment": "heartbeat"}  # nothing of u2's reaches u1
    finally:
        client.close()


def test_the_inbox_stream_takes_a_subscriber_token_only(users, live_api):
    with_key = SseClient(live_api, "/v1/inbox/stream", {"Authorization": f"Bearer {users.live_key}"})
    assert with_key.status == 403
    with_key.close()
    anonymous = SseClient(live_api, "/v1/inbox/stream")
    assert anonymous.status == 401
    anonymous.close()


def inbox_stream(live_api: str, token: str) -> SseClient:
    return SseClient(live_api, f"/v1/inbox/stream?token={token}")


def test_one_inbox_token_holds_at_most_its_share_of_a_process_s_streams(users, live_api, settings):
    token = token_for(users, "u1")
    held = [inbox_stream(live_api, token) for _ in range(settings.streams_per_inbox_token)]
    try:
        assert [client.status for client in held] == [200] * settings.streams_per_inbox_token
        excess = inbox_stream(live_api, token)
        assert excess.status == 429
        assert excess.response.getheader("Retry-After") == "5"
        body = json.loads(excess.response.read())
        assert body["code"] == 429 and "inbox token" in body["message"]
        excess.close()
        another = inbox_stream(live_api, token_for(users, "u1", ttl_seconds=601))  # another token of the same user
        assert another.status == 200
        another.close()
        for client in held:  # the streams under the cap go on
            assert client.next_data()["data"] == {"unread": 0, "total": 0}
            assert client.next(timeout=5) == {"comment": "heartbeat"}
    finally:
        for client in held:
            client.close()


def test_an_inbox_stream_ends_when_its_project_is_deleted(users, live_api, client):
    stream = inbox_stream(live_api, token_for(users, "u1"))
    try:
        assert stream.next_data()["data"] == {"unread": 0, "total": 0}
        assert stream.next(timeout=5) == {"comment": "heartbeat"}
        assert client.delete(f"/v1/admin/projects/{users.id}", headers=bearer(ADMIN_KEY)).status_code == 204
        # It ends, after at most the one heartbeat that may have left before the deletion.
        assert stream.count_until_the_end() in (0, 1)
    finally:
        stream.close()
