"""Accepting email that arrived over SMTP: one Tidings message per recipient.

The SMTP server answers 250 only once `accept_mail` has returned, and it returns only after
its transaction committed, so nothing a client was told is accepted can be lost. From there
the messages are API sends like any other: prepare applies suppressions (a suppressed
recipient ends `suppressed` with its event, never a bounce back to the application), picks
the provider, and deliver sends them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy.orm import Session, sessionmaker

from app.access import admission
from app.access.auth import Caller
from app.access.storage import stored_bytes
from app.content.addresses import normalise_address
from app.content.mime import Mail
from app.delivery import coalescer
from app.enums import Channel, Priority
from app.services import intake
from app.services.email_extras import files_refusal, providers_for_email, without_files


class FilesNotCarried(Exception):
    """The message has attachments and the provider it would go to cannot send them."""


def accept_mail(
    db: sessionmaker[Session],
    caller: Caller,
    recipients: Sequence[str],
    mail: Mail,
    chains: Mapping[Channel, Sequence[str]],
) -> list[str]:
    """Record `mail` once per distinct recipient in one statement; the new message ids.

    Attachments are refused up front when a provider the mail may reach cannot carry them:
    sending the words without the files would lose what the sender was told was accepted. A
    message the project's limits have no room for raises LimitReached, for every recipient.
    """
    if mail.attachments and (refusing := without_files(providers_for_email(chains, caller.is_test))):
        raise FilesNotCarried(files_refusal(refusing))
    common = intake.Common(
        channel=Channel.EMAIL,
        priority=mail.priority,
        category=mail.category,
        test=caller.is_test,
        subject=mail.subject,
        text=mail.text,
        html=mail.html,
        reply_to=mail.reply_to,
        cc=mail.cc,
        headers=mail.headers or None,
        attachments=mail.attachments,
    )
    addresses = dict.fromkeys(normalise_address("email", address) for address in recipients)
    with db.begin() as session:
        admission.admit(session, caller, Channel.EMAIL, len(addresses), stored=stored_bytes(common, len(addresses)))
        inserted = intake.insert_messages(
            session, caller.project_id, common, [intake.Recipient(to_address=address) for address in addresses]
        )
        ids = [str(row.id) for row in inserted]
        earned = intake.earn(
            caller.project_id, common.priority, len(ids), caller.limits.transactional_per_min, whole=True
        )
        if earned.demoted:
            intake.demote(session, caller.project_id, ids, earned)
    coalescer.prepare_soon(ids, Priority.BULK if earned.demoted else mail.priority, project=caller.project_id)
    return ids
