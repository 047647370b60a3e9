"""The topic fan-out benchmark, run small: both rates reported, every member sent to once."""

from __future__ import annotations

import re

from tests.loadtest.scripts import run_script


def test_the_fan_out_reports_its_rate_beside_the_batch_apis_and_writes_one_message_per_member(bench_env):
    out = run_script(
        "topics.py", "--members", "12000", "--batches", "2", "--recipients", "50", "--no-append", env=bench_env
    )
    assert re.search(r"^batch API: 100 messages in 2 requests of 50: [\d,]+ accepted/s$", out, re.MULTILINE)
    assert re.search(r"^topic send: answered 202 in \d+ ms \(accepted 12,000\); every message written", out, re.M)
    assert re.search(r"^ratio fan-out / batch API: [\d.]+$", out, re.MULTILINE)
    assert "members with no message 0, exactly one 12,000, more than one 0; messages to non-members 0" in out
    for process in ("api", "prepare", "deliver"):
        assert len(re.findall(rf"^  {process}: \d+ MB", out, re.MULTILINE)) == 2, process
