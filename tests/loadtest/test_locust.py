"""Locust, run for a few seconds through locust_run.py: the stack, the users, the report."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

LOADTEST = Path(__file__).resolve().parents[2] / "loadtest"


def route_figures(out: str) -> dict[str, tuple[int, int]]:
    """(requests, failures) by route, from lines like `POST /v1/messages: 40 requests, 0 failed, …`."""
    found = re.findall(r"^(\w+ /\S+|all routes): (\d+) requests, (\d+) failed", out, re.MULTILINE)
    return {route: (int(requests), int(failed)) for route, requests, failed in found}


def test_locust_sends_and_reads_and_leaves_its_reports(bench_env, tmp_path):
    command = [sys.executable, str(LOADTEST / "locust_run.py"), "--rate", "8", "--users", "4", "--duration", "6s"]
    command += ["--subscribers", "1000", "--api-workers", "1", "--workers", "1", "--results", str(tmp_path)]
    result = subprocess.run([*command, "--no-record"], env=bench_env, capture_output=True, text=True, timeout=240)
    out = result.stdout
    routes = route_figures(out)
    assert routes.get("POST /v1/messages", (0, 0))[0] > 0, out + result.stderr[-3000:]
    for route, (_, failed) in routes.items():
        assert failed == 0, f"{route} failed {failed} times:\n{out}"
    assert result.returncode == 0, out + result.stderr[-3000:]
    assert re.search(r"^provider: [1-9][\d,]* messages accepted", out, re.MULTILINE), out
    [report] = re.findall(r"^report: (.+)$", out, re.MULTILINE)
    assert Path(report).parent.parent == tmp_path
    assert "<html" in Path(report).read_text()[:2000].lower()
    assert (Path(report).parent / "locust_stats.csv").exists()


@pytest.mark.parametrize("host", ["http://example.com", "http://10.0.0.1:8000"])
def test_locust_refuses_a_host_that_is_not_this_machine(host):
    command = [sys.executable, "-m", "locust", "-f", str(LOADTEST / "locustfile.py"), "--headless"]
    result = subprocess.run(
        [*command, "--users", "1", "--run-time", "2s", "--host", host],
        env={**os.environ, "TIDINGS_API_KEY": "tid_live_x"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "locust runs only against 127.0.0.1 or localhost" in result.stderr
