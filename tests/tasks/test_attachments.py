"""Deliver hands an email's extras to the provider: files read once per batch, Reply-To, Cc, headers."""

from __future__ import annotations

import random
import string
import uuid
from typing import NamedTuple

import pytest
from sqlalchemy.orm import Session

from app.db import enqueue_after_commit
from app.delivery import dispatch
from app.enums import Channel, Priority
from app.services import intake
from providers.base import Attachment
from providers.log import LogProvider
from tasks import attachments
from tasks.attachments import FILE_CHUNK
from tests.conftest import create_project

ALPHABET = string.ascii_letters + string.digits + "+/"

pytestmark = pytest.mark.usefixtures("worker")


def test_files_and_extras_reach_the_provider_shared_by_every_recipient(client, engine):
    project = create_project(client)
    files = (Attachment("a.pdf", "application/pdf", "JVBERi0xLjQK"), Attachment("b.txt", "text/plain", "aGk="))
    common = intake.Common(
        channel=Channel.EMAIL,
        priority=Priority.TRANSACTIONAL,
        test=True,  # test messages always go to the log provider, which records them
        subject="Invoice",
        text="Attached.",
        reply_to="help@app.example",
        cc="zoe@example.com",
        headers={"Message-ID": "<1@app.example>"},
        attachments=files,
    )
    recipients = [intake.Recipient(to_address=f"user{n}@example.com") for n in range(3)]
    with Session(engine) as session, session.begin():
        ids = [str(row.id) for row in intake.insert_messages(session, project.id, common, recipients)]
        for signature in dispatch.prepare(ids, Priority.TRANSACTIONAL):
            enqueue_after_commit(session, signature)
    assert {project.wait_for(i)["status"] for i in ids} == {"sent"}
    sent = [outbound for outbound in LogProvider.record if outbound.message_id in ids]
    assert sorted(o.to for o in sent) == ["user0@example.com", "user1@example.com", "user2@example.com"]
    for outbound in sent:
        assert (outbound.reply_to, outbound.cc, dict(outbound.headers)) == (
            "help@app.example",
            "zoe@example.com",
            {"Message-ID": "<1@app.example>"},
        )
        assert outbound.attachments == files
    # One batch read each file once: every message shares the same objects.
    assert len({id(o.attachments[0].content) for o in sent}) == 1


class Claimed(NamedTuple):
    attachment_ids: list[str] | None


def test_files_of_many_chunks_are_stored_and_read_back_whole(client, engine):
    """Files go in by COPY a chunk at a time and come back in rows of FILE_CHUNK characters."""
    project = create_project(client)
    large = "".join(random.Random(7).choices(ALPHABET, k=2 * FILE_CHUNK + 5)) + "=="
    files = [Attachment("a.pdf", "application/pdf", large), Attachment("b.txt", "text/plain", "aGk=")]
    ids = [str(uuid.uuid4()) for _ in files]
    with Session(engine) as session, session.begin():
        intake._store_files(session, project.id, ids, files)
        loaded = attachments.load(session, [Claimed([ids[0]]), Claimed(ids), Claimed(None)])
        session.rollback()
    assert loaded == dict(zip(ids, files, strict=True))
