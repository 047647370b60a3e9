"""The SMTP benchmark, run small: it starts `tidings smtp`, sends, measures, and finds every message stored."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "loadtest" / "smtp_bench.py"


def test_the_bench_reports_rate_and_cpu_and_loses_nothing(migrated):
    env = {**os.environ, "DATABASE_URL": migrated.database_url, "REDIS_URL": migrated.redis_url}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--messages", "12", "--clients", "3", "--recipients", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^accepted: \d+ messages/s$", result.stdout, re.MULTILINE)
    assert re.search(r"^server CPU: [\d.]+ s user\+system = \d+ µs per message", result.stdout, re.MULTILINE)
    assert "stored: 24 rows for 24 recipients, 0 lost" in result.stdout
