"""A benchmark script of loadtest/ run as its command line, as each test of this folder runs one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

LOADTEST = Path(__file__).resolve().parents[2] / "loadtest"


def run_script(name: str, *args: str, env: Mapping[str, str], timeout: float = 300) -> str:
    """What `loadtest/<name>` printed; the test fails, showing its output, unless it exits 0."""
    result = subprocess.run(
        [sys.executable, str(LOADTEST / name), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    return result.stdout
