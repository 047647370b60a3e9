"""`tidings flower`: basic auth from configuration, persistent state, readable task names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import requests

from app.delivery.broker import celery_app
from app.runtime.embedded import free_port
from tasks.celery_app import BEAT_TASKS


def test_every_task_has_an_explicit_readable_name():
    celery_app.loader.import_default_modules()  # what a worker imports at start
    ours = {name for name in celery_app.tasks if not name.startswith("celery.")}
    assert ours == {
        "tidings.prepare",
        "tidings.prepare_next",
        "tidings.fan_out",
        "tidings.workflow_step",
        "tidings.workflow_fan_out",
        "tidings.deliver",
        "tidings.deliver_next",
        "tidings.deliver_waiting",
        "tidings.resend",
        "tidings.reports",
        "tidings.webhooks.deliver",
        "tidings.redispatch_waiting",  # a worker's, once its broker is back (tasks/reconnect.py)
        *BEAT_TASKS,
    }
    for name in ours:
        assert celery_app.tasks[name].run.__name__ != "<lambda>"


def test_flower_asks_for_basic_auth_and_keeps_its_state(migrated, tmp_path):
    port = free_port()
    env = {
        **os.environ,
        **migrated.environ,
        "FLOWER_PORT": str(port),
        "FLOWER_BASIC_AUTH": "ops:correct-horse",
        "TIDINGS_VAR_DIR": str(tmp_path),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "app.runtime.cli", "flower"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/healthcheck", timeout=1).text == "OK":
                    break
            except requests.ConnectionError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "Flower did not start"
            time.sleep(0.2)
        assert requests.get(f"{url}/workers", timeout=5).status_code == 401
        assert requests.get(f"{url}/workers", auth=("ops", "wrong-password"), timeout=5).status_code == 401
        assert requests.get(f"{url}/workers", auth=("ops", "correct-horse"), timeout=5).status_code == 200
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    assert any(path.name.startswith("flower.db") for path in tmp_path.iterdir())
