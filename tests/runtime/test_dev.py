"""`make run`'s entry point on embedded servers: ready, one notification to `sent`, clean stop."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from app.runtime.embedded import free_port

pytestmark = pytest.mark.slow


def wait_for_line(process: subprocess.Popen, pattern: str, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found
    raise AssertionError(f"no line matching {pattern!r}; output:\n{''.join(seen[-40:])}")


def restart_the_worker(process: subprocess.Popen) -> list[psutil.Process]:
    """SIGKILL dev's worker child; dev must say so, start another, and name its pid. The
    processes under dev afterwards."""
    workers = [c for c in psutil.Process(process.pid).children() if c.cmdline()[-1:] == ["worker"]]
    assert len(workers) == 1, [c.cmdline() for c in psutil.Process(process.pid).children()]
    workers[0].kill()
    wait_for_line(process, r"tidings: worker exited with -9; restarting it in 1 s \(1 in a row\)", 10)
    new_pid = int(wait_for_line(process, r"tidings: worker restarted \(pid (\d+)\)", 10).group(1))
    assert new_pid != workers[0].pid and psutil.Process(new_pid).cmdline()[-1] == "worker"
    return psutil.Process(process.pid).children(recursive=True)


def test_dev_runs_the_whole_stack_restarts_a_dead_worker_and_stops_cleanly(tmp_path: Path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"}}
    env.update(
        TIDINGS_VAR_DIR=str(tmp_path / "var"),
        TIDINGS_PORT=str(port),
        FLOWER_PORT=str(free_port()),
        TIDINGS_ADMIN_KEY="dev-test-admin-key-0123",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "app.runtime.cli", "dev"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = wait_for_line(process, r"Tidings is ready at (http://127\.0\.0\.1:\d+)", 120).group(1)
        console = wait_for_line(process, r"console:\s+(\S+)", 5).group(1)
        key = wait_for_line(process, r"demo project key:\s+(\S+)", 5).group(1)
        assert url == f"http://127.0.0.1:{port}"
        assert console == f"{url}/console"
        login = requests.get(f"{console}/login", timeout=5)
        assert login.status_code == 200 and "Sign in" in login.text
        assert requests.get(f"{console}/static/console.css", timeout=5).status_code == 200
        children = psutil.Process(process.pid).children(recursive=True)
        assert [c.cmdline()[-4:] for c in children].count(["worker", "--transactional", "-n", "transactional@%h"]) == 1
        headers = {"Authorization": f"Bearer {key}"}
        body = {
            "channel": "email",
            "to": {"email": "ada@example.com"},
            "content": {"subject": "Hi", "text": "First"},
        }
        sent = requests.post(f"{url}/v1/messages", json=body, headers=headers, timeout=10)
        assert sent.status_code == 202
        deadline = time.monotonic() + 30
        while (
            status := requests.get(f"{url}/v1/messages/{sent.json()['id']}", headers=headers, timeout=5).json()[
                "status"
            ]
        ) != "sent" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status == "sent"
        children = restart_the_worker(process)
        again = requests.post(f"{url}/v1/messages", json=body, headers=headers, timeout=10).json()["id"]
        deadline = time.monotonic() + 60
        while (
            status := requests.get(f"{url}/v1/messages/{again}", headers=headers, timeout=5).json()["status"]
        ) != "sent" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert status == "sent"
        assert (
            requests.get(
                f"{url}/v1/admin/projects",
                headers={"Authorization": "Bearer dev-test-admin-key-0123"},
                timeout=5,
            ).status_code
            == 200
        )
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert process.returncode == 0
    assert [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE] == []
    assert not (tmp_path / "var" / "pg" / "postmaster.pid").exists()
