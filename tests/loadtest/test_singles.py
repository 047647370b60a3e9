"""The single-send benchmark, run small: both throughput runs and the end-to-end run, nothing lost."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "loadtest" / "singles.py"
ARGS = ["--clients", "4", "--seconds", "2", "--rate", "20", "--e2e-seconds", "2", "--no-append"]


def test_the_load_reports_rates_latencies_and_backlog_and_loses_nothing(bench_env):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *ARGS],
        env=bench_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    rate = r"\d+ accepted in [\d.]+ s = \d+ req/s, p50 [\d.]+ ms, p99 [\d.]+ ms; errors: none"
    assert re.search(rf"^end to end at 20/s for 2 s \(4 clients, \d+ sends late .*\): 40 {rate[4:]}$", out, re.M)
    assert re.search(r"^  accept → sent: p50 \d+ ms, p99 \d+ ms, max \d+ ms$", out, re.M)
    assert re.search(r"^  statuses: sent 40; lost: 0$", out, re.M)
    assert re.search(r"^  backlog \(not yet terminal, once a second\):( \d+)+$", out, re.M)
    assert re.search(rf"^ours, 4 clients for 2 s: {rate}$", out, re.M)
    answered = int(re.search(r"^ours, .*: (\d+) accepted", out, re.M).group(1))
    assert f"  stored: {answered} of {answered} answered, 0 lost" in out
    assert re.search(rf"^bare endpoint \(one INSERT \+ one publish, same gunicorn settings\): {rate}$", out, re.M)
    assert re.search(r"^ours / bare: [\d.]+$", out, re.M)
