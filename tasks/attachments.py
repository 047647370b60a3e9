"""The files of a claimed batch, read once each however many of its messages name them.

One SMTP message to fifty recipients is fifty claimed rows naming the same files: reading
the files apart from the claim keeps one copy of each in the worker, shared by every
message's Outbound, instead of one per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.delivery import store
from providers.base import Attachment

FILE_CHUNK = 1024 * 1024  # characters of a file's base64 read in one row


def load(session: Session, claimed: Sequence[store.Claimed]) -> dict[str, Attachment]:
    """Attachment id → file, for every attachment the claimed rows name; one query, none without files.

    Each file comes in rows of FILE_CHUNK characters: libpq keeps a buffer as large as the
    largest row its connection ever read, so a 10 MiB file read whole stayed 14 MB in every
    pooled connection that read one, long after its task.
    """
    wanted = sorted({file_id for row in claimed for file_id in row.attachment_ids or ()})
    if not wanted:
        return {}
    rows = session.execute(
        text(
            """
            SELECT id::text AS id, filename, content_type, substr(content, part * :chunk + 1, :chunk) AS content
            FROM attachments, generate_series(0, greatest(length(content) - 1, 0) / :chunk) AS part
            WHERE id = ANY(CAST(:ids AS uuid[]))
            ORDER BY id, part
            """
        ),
        {"ids": wanted, "chunk": FILE_CHUNK},
    ).all()
    files: dict[str, Attachment] = {}
    for file_id, parts in groupby(rows, key=lambda row: row.id):
        first, *rest = parts
        content = "".join([first.content, *(part.content for part in rest)])
        files[file_id] = Attachment(first.filename, first.content_type, content)
    return files
