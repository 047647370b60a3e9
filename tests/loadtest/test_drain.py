"""The drain benchmark, run small: both provider modes and both ceilings, and nothing lost.

It enqueues through POST /v1/messages/batch, so it passes once the batch API is there.
"""

from __future__ import annotations

import re

from tests.loadtest.scripts import run_script


def test_the_drain_reports_every_figure_and_every_message_ends_terminal(bench_env):
    out = run_script(
        "drain.py", "--batches", "2", "--recipients", "50", "--noop-tasks", "100", "--no-append", env=bench_env
    )
    assert re.search(r"^ceiling, raw COPY of the same 100 rows .*: \d+ rows/s$", out, re.MULTILINE)
    assert re.search(r"^ceiling, no-op Celery task: 100 drained in [\d.]+ s = \d+ tasks/s", out, re.MULTILINE)
    assert "mode batch (log provider, 100 messages per call):" in out
    assert "mode single (log provider, one message per call):" in out
    for each_mode in (
        r"^  enqueue: 100 accepted, 0 rejected, 2 POSTs of 50 .* = \d+ jobs/s \([\d.]+ of raw COPY\)$",
        r"^  drain: 100 in [\d.]+ s = \d+ jobs/s \([\d.]+ times the no-op task rate\)$",
        r"^  statuses: sent 100; lost: 0$",
        r"^  CPU ms per job while draining: api [\d.]+, prepare [\d.]+, deliver [\d.]+, .*; all [\d.]+$",
        r"^  bytes per message .*: -?\d+ before VACUUM, -?\d+ after VACUUM, -?\d+ after VACUUM FULL$",
        *(rf"^    {process}: \d+ MB" for process in ("prepare", "deliver", "beat", "api", "postgres", "redis")),
    ):
        assert len(re.findall(each_mode, out, re.MULTILINE)) == 2, each_mode
