"""Retention deletes finished messages past their project's days, then the files no message
names any more, and nothing else."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.db import session_factory
from app.delivery.retention import purge
from app.enums import Channel, Priority
from app.services import intake
from providers.base import Attachment
from tests.conftest import ADMIN_KEY, bearer, create_project


def insert(engine, project_id: str, status: str, age_days: float, count: int = 1) -> list[str]:
    """Messages `age_days` old, each with content and one event."""
    with engine.begin() as connection:
        ids = list(
            connection.execute(
                text(
                    """
                    INSERT INTO messages (project_id, channel, status, priority, to_address, created_at)
                    SELECT :project, 'email', :status, 'bulk', 'x@example.com',
                           now() - make_interval(secs => :age * 86400)
                    FROM generate_series(1, :count) RETURNING id::text
                    """
                ),
                {"project": project_id, "status": status, "age": age_days, "count": count},
            ).scalars()
        )
        connection.execute(
            text(
                "INSERT INTO message_contents (message_id, subject, text) "
                "SELECT id, 'Old news', 'Body' FROM unnest(CAST(:ids AS uuid[])) AS id"
            ),
            {"ids": ids},
        )
        connection.execute(
            text(
                "INSERT INTO events (message_id, project_id, type, at) "
                "SELECT id, :project, 'failed', now() - make_interval(secs => :age * 86400) "
                "FROM unnest(CAST(:ids AS uuid[])) AS id"
            ),
            {"ids": ids, "project": project_id, "age": age_days},
        )
    return ids


def surviving(engine, ids: list[str]) -> dict[str, int]:
    with engine.connect() as connection:
        return {
            table: connection.execute(
                text(f"SELECT count(*) FROM {table} WHERE {column} = ANY(CAST(:ids AS uuid[]))"), {"ids": ids}
            ).scalar_one()
            for table, column in (("messages", "id"), ("message_contents", "message_id"), ("events", "message_id"))
        }


def test_only_finished_messages_past_retention_go(client, migrated, engine):
    short = create_project(client, settings={"retention_days": 2})
    default = create_project(client)
    assert (
        client.get(f"/v1/admin/projects/{default.id}", headers=bearer(ADMIN_KEY)).get_json()["settings"][
            "retention_days"
        ]
        == 30
    )
    expired = insert(engine, short.id, "sent", 3, count=7) + insert(engine, short.id, "dead", 3)
    young = insert(engine, short.id, "sent", 1)
    still_active = insert(engine, short.id, "scheduled", 40) + insert(engine, short.id, "retrying", 3)
    other_project = insert(engine, default.id, "sent", 3) + insert(engine, default.id, "failed", 29)
    db = session_factory(migrated.database_url)

    dry = purge(db, project=short.id, dry_run=True)
    assert dry.deleted == {short.id: 8}
    assert surviving(engine, expired)["messages"] == 8

    report = purge(db, batch=3)
    assert report.finished
    assert report.deleted[short.id] == 8
    assert report.deleted[default.id] == 0
    assert surviving(engine, expired) == {"messages": 0, "message_contents": 0, "events": 0}
    kept = young + still_active + other_project
    assert surviving(engine, kept) == {"messages": 5, "message_contents": 5, "events": 5}


def test_retention_days_are_validated(client):
    answer = client.post(
        "/v1/admin/projects", json={"name": "X", "settings": {"retention_days": 0}}, headers=bearer(ADMIN_KEY)
    )
    assert answer.status_code == 422
    assert "retention_days" in answer.get_json()["errors"]["json"]["settings"]


def test_a_run_out_of_time_says_so_and_deletes_nothing_more(client, migrated, engine):
    project = create_project(client, settings={"retention_days": 1})
    expired = insert(engine, project.id, "sent", 2, count=3)
    report = purge(session_factory(migrated.database_url), project=project.id, max_seconds=0)
    assert not report.finished
    assert surviving(engine, expired)["messages"] == 3


def send_with_files(engine, project_id: str, files: int, statuses: list[str], age_days: float) -> list[str]:
    """One send's messages (one per status) sharing `files` files, all `age_days` old, as
    SMTP or a batch writes them."""
    common = intake.Common(
        channel=Channel.EMAIL,
        priority=Priority.BULK,
        subject="Invoice",
        text="Attached.",
        attachments=tuple(Attachment(f"f{n}.pdf", "application/pdf", "JVBERi0xLjQK") for n in range(files)),
    )
    recipients = [intake.Recipient(to_address=f"user{n}@example.com") for n in range(len(statuses))]
    with Session(engine) as session, session.begin():
        ids = [str(row.id) for row in intake.insert_messages(session, project_id, common, recipients)]
        session.execute(
            text(
                """
                UPDATE messages m SET status = v.status, created_at = now() - make_interval(secs => :age * 86400)
                FROM unnest(CAST(:ids AS uuid[]), CAST(:statuses AS text[])) AS v(id, status) WHERE m.id = v.id
                """
            ),
            {"ids": ids, "statuses": statuses, "age": age_days},
        )
        session.execute(
            text(
                "UPDATE attachments SET created_at = now() - make_interval(secs => :age * 86400) "
                "WHERE id IN (SELECT unnest(attachment_ids) FROM message_contents "
                "WHERE message_id = ANY(CAST(:ids AS uuid[])))"
            ),
            {"ids": ids, "age": age_days},
        )
    return ids


def files_of(engine, project_id: str) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT count(*) FROM attachments WHERE project_id = :p"), {"p": project_id}
        ).scalar_one()


def test_files_go_once_no_message_names_them(client, migrated, engine):
    project = create_project(client, settings={"retention_days": 2})
    gone = send_with_files(engine, project.id, 2, ["sent", "delivered", "failed"], 3)
    waiting = send_with_files(engine, project.id, 1, ["sent", "retrying"], 3)  # one still on its way
    young = send_with_files(engine, project.id, 1, ["sent"], 1)
    # A file an earlier run left behind: old, and named by no message any more.
    left_behind = send_with_files(engine, project.id, 1, ["sent"], 3)
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM messages WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": left_behind})
    assert files_of(engine, project.id) == 5

    report = purge(session_factory(migrated.database_url), project=project.id)
    assert report.finished
    assert (report.deleted[project.id], report.files[project.id]) == (4, 3)
    assert surviving(engine, gone)["messages"] == 0
    assert surviving(engine, waiting + young)["messages"] == 2
    # The retrying message still names its file, and the young message its own.
    assert files_of(engine, project.id) == 2
    with engine.connect() as connection:
        named = connection.execute(
            text(
                "SELECT count(*) FROM attachments a WHERE a.project_id = :p AND EXISTS "
                "(SELECT FROM message_contents c WHERE c.attachment_ids @> ARRAY[a.id])"
            ),
            {"p": project.id},
        ).scalar_one()
    assert named == 2
