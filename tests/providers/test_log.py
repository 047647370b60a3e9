"""The `log` provider's batch size (one setting deliver tasks and the adapter both follow) and its record."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from providers.base import Attachment, Outbound
from providers.log import DEFAULT_MAX_BATCH, RECORD_FILE_CHARACTERS, Record, max_batch_from

# What a fresh process sees: the ids per deliver task dispatch makes for 120 messages, and
# the messages per call of the adapter the worker builds.
PROBE = """
import json
from providers import registry
from app.delivery import dispatch
sizes = [len(s.args[1]) for s in dispatch.deliver("log", "bulk", [str(n) for n in range(120)])]
print(json.dumps({"tasks": sizes, "adapter": registry.build("log", {}).max_batch}))
"""


def probe(**env: str) -> dict:
    inherited = {k: v for k, v in os.environ.items() if k != "LOG_PROVIDER_MAX_BATCH"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env={**inherited, **env}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_default_is_a_batch_of_500():
    assert max_batch_from({}) == DEFAULT_MAX_BATCH == 500
    assert probe() == {"tasks": [120], "adapter": 500}


def test_batches_of_100_size_the_deliver_tasks_and_the_calls():
    assert probe(LOG_PROVIDER_MAX_BATCH="100") == {"tasks": [100, 20], "adapter": 100}


def test_one_message_per_call_still_carries_many_per_task():
    """A provider without a batch API pays per call, not per task: tasks keep their minimum size."""
    assert probe(LOG_PROVIDER_MAX_BATCH="1") == {"tasks": [50, 50, 20], "adapter": 1}


@pytest.mark.parametrize("value", ["0", "-3", "ten", "1.5"])
def test_a_bad_value_is_refused_with_its_name(value):
    with pytest.raises(ValueError, match="LOG_PROVIDER_MAX_BATCH"):
        max_batch_from({"LOG_PROVIDER_MAX_BATCH": value})


def test_the_record_holds_the_files_of_two_large_sends_at_most():
    """Test keys reach this provider with 10 MiB files in a loop: the record keeps the newest
    messages whose files fit RECORD_FILE_CHARACTERS, however many its count would allow."""
    record = Record(most=10_000, file_characters=RECORD_FILE_CHARACTERS)
    large = Attachment("big.pdf", "application/pdf", "A" * (RECORD_FILE_CHARACTERS // 2))
    sent = [Outbound(f"m{n}", "email", f"u{n}@example.com", attachments=(large,)) for n in range(3)]
    record.extend([*sent[:2], Outbound("plain", "email", "p@example.com")])
    record.extend(sent[2:])
    assert [message.message_id for message in record] == ["m1", "plain", "m2"]
    assert record.held == RECORD_FILE_CHARACTERS
    record.clear()
    record.extend(sent[:2])
    assert [message.message_id for message in record] == ["m0", "m1"]
