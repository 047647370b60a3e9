"""The in-process CPU benchmark, run small: both apps answer every send, and each round's
figures and ratio are reported."""

from __future__ import annotations

import re

from sqlalchemy import text

from tests.loadtest.scripts import run_script

FIGURE = r"[\d.]+"


def test_the_send_cpu_benchmark_reports_both_apps_and_their_ratio_per_round(bench_env, engine):
    out = run_script("send_cpu.py", "--sends", "100", "--rounds", "2", "--no-append", env=bench_env)
    for row in ("`POST /v1/messages`", "bare endpoint \\(INSERT \\+ publish\\)", "ours / bare, per round"):
        assert re.search(rf"^\| {row} \| {FIGURE} \| {FIGURE}, {FIGURE} \|$", out, re.M), row
    with engine.connect() as connection:  # the run cleans up after itself
        assert connection.scalar(text("SELECT count(*) FROM projects WHERE id LIKE 'send-cpu-%'")) == 0
        assert connection.scalar(text("SELECT to_regclass('bare_messages')")) is None
