"""The SMTP benchmark, run small: it starts `tidings smtp`, sends, measures, and finds every message stored."""

from __future__ import annotations

import re

from tests.loadtest.scripts import run_script


def test_the_bench_reports_rate_and_cpu_and_loses_nothing(bench_env):
    arguments = ("--messages", "12", "--clients", "3", "--recipients", "2")
    out = run_script("smtp_bench.py", *arguments, env=bench_env, timeout=120)
    assert re.search(r"^accepted: \d+ messages/s$", out, re.MULTILINE)
    assert re.search(r"^server CPU: [\d.]+ s user\+system = \d+ µs per message", out, re.MULTILINE)
    assert "stored: 24 rows for 24 recipients, 0 lost" in out
