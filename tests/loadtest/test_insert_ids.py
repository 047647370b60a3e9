"""The ids benchmark, run small: both kinds of id measured in every round, and nothing left behind."""

from __future__ import annotations

import re

from sqlalchemy import text

from tests.loadtest.scripts import run_script


def test_the_ids_benchmark_reports_wal_and_time_per_send_for_both_kinds_and_removes_its_project(bench_env, engine):
    out = run_script(
        "insert_ids.py", "--rows", "2000", "--inserts", "100", "--rounds", "2", "--no-append", env=bench_env
    )
    for kind in (r"random \(v4\)", r"time-ordered \(v7\)"):
        assert re.search(rf"^\| {kind} \| [1-9][\d,]* \| [\d.]+ \| [\d.]+ \| [\d,]+, [\d,]+ \|$", out, re.M), out
    with engine.connect() as connection:
        assert connection.scalar(text("SELECT count(*) FROM projects WHERE id LIKE 'insert-ids-%'")) == 0
        assert connection.scalar(text("SELECT count(*) FROM messages WHERE project_id LIKE 'insert-ids-%'")) == 0
