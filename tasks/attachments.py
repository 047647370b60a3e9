"""The files of a claimed batch, read once each however many of its messages name them.

One SMTP message to fifty recipients is fifty claimed rows naming the same files: reading
the files apart from the claim keeps one copy of each in the worker, shared by every
message's Outbound, instead of one per row.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Row, text
from sqlalchemy.orm import Session

from providers.base import Attachment


def load(session: Session, claimed: Sequence[Row]) -> dict[str, Attachment]:
    """Attachment id → file, for every attachment the claimed rows name; one query, none without files."""
    wanted = sorted({file_id for row in claimed for file_id in row.attachment_ids or ()})
    if not wanted:
        return {}
    rows = session.execute(
        text(
            """
            SELECT id::text AS id, filename, content_type, content
            FROM attachments WHERE id = ANY(CAST(:ids AS uuid[]))
            """
        ),
        {"ids": wanted},
    ).all()
    return {row.id: Attachment(row.filename, row.content_type, row.content) for row in rows}
