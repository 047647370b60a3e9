"""The shared insert: one statement for every recipient, content and files written once."""

from __future__ import annotations

import time
import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.enums import Channel, Priority
from app.services import intake
from providers.base import Attachment
from tests.conftest import create_project

FILES = (Attachment("a.pdf", "application/pdf", "JVBERi0xLjQK"), Attachment("b.txt", "text/plain", "aGk="))


@pytest.fixture
def project_id(client) -> str:
    return create_project(client).id


def stored(engine, project_id: str) -> list:
    with engine.connect() as connection:
        return connection.execute(
            text(
                """
                SELECT m.to_address, m.status, c.subject, c.reply_to, c.cc, c.headers,
                       ARRAY(SELECT a.filename FROM unnest(c.attachment_ids) WITH ORDINALITY AS f(id, n)
                             JOIN attachments a ON a.id = f.id ORDER BY f.n) AS files
                FROM messages m JOIN message_contents c ON c.message_id = m.id
                WHERE m.project_id = :p ORDER BY m.to_address
                """
            ),
            {"p": project_id},
        ).all()


def test_every_recipient_gets_a_message_and_the_files_are_stored_once(engine, project_id):
    common = intake.Common(
        channel=Channel.EMAIL,
        priority=Priority.BULK,
        subject="Invoice",
        reply_to="help@app.example",
        cc="Zoë <zoe@example.com>",
        headers={"Message-ID": "<1@app.example>"},
        attachments=FILES,
    )
    recipients = [intake.Recipient(to_address=f"{name}@example.com") for name in ("b", "a", "c")]
    with Session(engine) as session, session.begin():
        inserted = intake.insert_messages(session, project_id, common, recipients)
    assert len(inserted) == 3
    rows = stored(engine, project_id)
    assert [tuple(row) for row in rows] == [
        (
            f"{name}@example.com",
            "accepted",
            "Invoice",
            "help@app.example",
            "Zoë <zoe@example.com>",
            {"Message-ID": "<1@app.example>"},
            ["a.pdf", "b.txt"],
        )
        for name in ("a", "b", "c")
    ]
    with engine.connect() as connection:
        files = connection.scalar(text("SELECT count(*) FROM attachments WHERE project_id = :p"), {"p": project_id})
    assert files == 2


def test_a_used_idempotency_key_inserts_nothing_at_all(engine, project_id):
    common = intake.Common(channel=Channel.EMAIL, priority=Priority.TRANSACTIONAL, subject="Once", attachments=FILES)
    recipient = intake.Recipient(to_address="a@example.com", idempotency_key="k1", request_hash="h")
    with Session(engine) as session, session.begin():
        assert len(intake.insert_messages(session, project_id, common, [recipient])) == 1
    with Session(engine) as session, session.begin():
        assert intake.insert_messages(session, project_id, common, [recipient]) == []
    with engine.connect() as connection:
        counts = connection.execute(
            text(
                """
                SELECT (SELECT count(*) FROM messages WHERE project_id = :p),
                       (SELECT count(*) FROM attachments WHERE project_id = :p)
                """
            ),
            {"p": project_id},
        ).one()
    assert tuple(counts) == (1, 2)


def test_without_files_or_extras_nothing_is_stored_for_them(engine, project_id):
    common = intake.Common(channel=Channel.SMS, priority=Priority.TRANSACTIONAL, text="Code 1234")
    with Session(engine) as session, session.begin():
        intake.insert_messages(session, project_id, common, [intake.Recipient(to_address="+4915112345678")])
    with engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT c.attachment_ids, c.headers, c.data FROM message_contents c "
                "JOIN messages m ON m.id = c.message_id WHERE m.project_id = :p"
            ),
            {"p": project_id},
        ).one()
    assert tuple(row) == (None, None, {})


def test_copy_keeps_every_character_and_merges_each_recipients_data(engine, project_id):
    tricky = "tab\there, line\nbreak, back\\slash, \r, \\N, ünïcode ✓"
    batch_id = uuid.uuid4()
    common = intake.Common(
        channel=Channel.EMAIL,
        priority=Priority.BULK,
        subject=tricky,
        text="Hi {{ name }}",
        data={"name": "friend", "issue": 12},
        meta={"campaign": tricky},
        batch_id=batch_id,
    )
    recipients = [
        intake.BatchRecipient(None, "a@example.com", {"name": tricky}),
        intake.BatchRecipient("sub\\1\t", None),
    ]
    with Session(engine) as session, session.begin():
        ids = intake.copy_messages(session, project_id, common, recipients)
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                """
                SELECT m.id::text, m.to_address, m.subscriber_id, m.status, m.priority, c.subject, c.text, c.data,
                       c.metadata
                FROM messages m JOIN message_contents c ON c.message_id = m.id
                WHERE m.batch_id = :b ORDER BY m.to_address NULLS LAST
                """
            ),
            {"b": batch_id},
        ).all()
    assert [tuple(row) for row in rows] == [
        (
            ids[0],
            "a@example.com",
            None,
            "accepted",
            "bulk",
            tricky,
            "Hi {{ name }}",
            {"name": tricky, "issue": 12},
            {"campaign": tricky},
        ),
        (
            ids[1],
            None,
            "sub\\1\t",
            "accepted",
            "bulk",
            tricky,
            "Hi {{ name }}",
            {"name": "friend", "issue": 12},
            {"campaign": tricky},
        ),
    ]


def test_new_ids_are_version_7_uuids_in_time_order():
    first = intake.new_message_ids(3)
    time.sleep(0.002)
    second = intake.new_message_ids(1)
    parsed = [uuid.UUID(i) for i in first + second]
    assert {(u.version, u.variant) for u in parsed} == {(7, uuid.RFC_4122)}
    assert max(first) < second[0]
    assert len(set(first)) == 3


def test_a_send_names_its_messages_with_time_ordered_ids_as_a_batch_does(engine, project_id):
    common = intake.Common(channel=Channel.EMAIL, priority=Priority.TRANSACTIONAL, subject="Ordered")
    ids = []
    for n in range(3):
        time.sleep(0.002)  # a new millisecond for each send, which the ids must follow
        with Session(engine) as session, session.begin():
            [row] = intake.insert_messages(session, project_id, common, [intake.Recipient(to_address=f"{n}@e.test")])
        ids.append(row.id)
    assert {(i.version, i.variant) for i in ids} == {(7, uuid.RFC_4122)}
    assert ids == sorted(ids)
    with engine.connect() as connection:
        stored_ids = connection.scalars(
            text("SELECT m.id FROM messages m JOIN message_contents c ON c.message_id = m.id WHERE m.project_id = :p"),
            {"p": project_id},
        ).all()
    assert sorted(stored_ids) == ids


def test_copy_stores_a_batchs_files_once_and_every_message_names_them(engine, project_id):
    common = intake.Common(
        channel=Channel.EMAIL,
        priority=Priority.BULK,
        subject="Price list",
        from_address="Acme <news@acme.example>",
        attachments=FILES,
    )
    recipients = [intake.BatchRecipient(None, f"{name}@example.com") for name in ("a", "b", "c")]
    with Session(engine) as session, session.begin():
        intake.copy_messages(session, project_id, common, recipients)
    rows = stored(engine, project_id)
    assert [(row.to_address, row.files) for row in rows] == [
        (f"{name}@example.com", ["a.pdf", "b.txt"]) for name in ("a", "b", "c")
    ]
    with engine.connect() as connection:
        files = connection.scalar(text("SELECT count(*) FROM attachments WHERE project_id = :p"), {"p": project_id})
        senders = connection.execute(
            text(
                "SELECT DISTINCT c.from_address FROM message_contents c JOIN messages m ON m.id = c.message_id "
                "WHERE m.project_id = :p"
            ),
            {"p": project_id},
        ).scalars()
        assert list(senders) == ["Acme <news@acme.example>"]
    assert files == 2
