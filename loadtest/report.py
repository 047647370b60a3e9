"""Appending a benchmark's figures to BENCHMARKS.md, with the machine they were taken on.

Every benchmark in this folder prints its figures and then calls `append_section`, so a
run leaves a dated record beside the earlier ones instead of replacing them: the machine
is shared, and a figure means little without the load it was taken under.
"""

from __future__ import annotations

import os
import platform
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def machine() -> str:
    """One line naming the machine: cores, CPU model, Python, and the load average at the time."""
    model = next(
        (line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")),
        platform.processor() or "unknown CPU",
    )
    load = ", ".join(f"{figure:.1f}" for figure in os.getloadavg())
    return f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, load average {load}"


def append_section(heading: str, body: str, command: list[str] | None = None) -> None:
    """Add one dated run to BENCHMARKS.md: the heading, the command that produced it, the machine, the figures."""
    command_line = shlex.join(command if command is not None else [Path(sys.executable).name, *sys.argv])
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with BENCHMARKS.open("a") as out:
        out.write(f"\n### {heading} — {stamp}\n\n`{command_line}`\n\nMachine: {machine()}.\n\n{body.rstrip()}\n")


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []
