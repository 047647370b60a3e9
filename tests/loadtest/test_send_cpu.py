"""The in-process CPU benchmark, run small: both apps answer every send, and each round's
figures and ratio are reported."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sqlalchemy import text

SCRIPT = Path(__file__).resolve().parents[2] / "loadtest" / "send_cpu.py"
FIGURE = r"[\d.]+"


def test_the_send_cpu_benchmark_reports_both_apps_and_their_ratio_per_round(bench_env, engine):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--sends", "100", "--rounds", "2", "--no-append"],
        env=bench_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    for row in ("`POST /v1/messages`", "bare endpoint \\(INSERT \\+ publish\\)", "ours / bare, per round"):
        assert re.search(rf"^\| {row} \| {FIGURE} \| {FIGURE}, {FIGURE} \|$", out, re.M), row
    with engine.connect() as connection:  # the run cleans up after itself
        assert connection.scalar(text("SELECT count(*) FROM projects WHERE id LIKE 'send-cpu-%'")) == 0
        assert connection.scalar(text("SELECT to_regclass('bare_messages')")) is None
