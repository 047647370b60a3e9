"""The workflow benchmark, run small: each step's rate, the delay's lateness, rows per run, and
exactly the runs whose first message was opened stopped at the branch."""

from __future__ import annotations

import re

from tests.loadtest.scripts import run_script


def test_the_workflow_benchmark_reports_each_step_and_stops_exactly_the_opened_runs(bench_env):
    out = run_script("workflows.py", "--runs", "2000", "--delay", "2", "--no-append", env=bench_env)
    for step, name in enumerate(("send", "delay", "branch")):
        assert re.search(rf"^step {step} \({name}\): 2,000 runs in [\d.]+ s: [\d,]+ runs/s$", out, re.M), name
    assert re.search(r"^step 3 \(send again\): [\d,]+ runs", out, re.M)
    assert re.search(r"^delay lateness \(branch taken after the delay's end\): p50 [\d.]+ s, p99 [\d.]+ s", out, re.M)
    opened = int(re.search(r"first messages marked opened: ([\d,]+);", out).group(1).replace(",", ""))
    assert 0 < opened < 2000
    assert f"runs completed 2,000, stopped at the branch {opened:,} (of them not opened: 0)" in out
    assert "opened but sent again: 0; sent again without exactly two messages: 0" in out
    assert re.search(r"^rows written per run \(inserts \+ updates\): workflow_runs [\d.]+, ", out, re.M)
