"""Deliver hands an email's extras to the provider: files read once per batch, Reply-To, Cc, headers."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from app.db import enqueue_after_commit
from app.delivery import dispatch
from app.enums import Channel, Priority
from app.services import intake
from providers.base import Attachment
from providers.log import LogProvider
from tests.conftest import create_project

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
