"""Where each process of the stack spends its CPU: py-spy sampling the live processes.

`soak.py --profile` records the API and each worker (with their children) for a stretch
in the middle of the soak with `py-spy record` (a dev tool: `pip install py-spy`). Each
record is kept as collapsed stacks in <run>/profile-<role>.txt (speedscope and
flamegraph.pl read them), and `hot_spots` names the functions of ours (app/, tasks/,
providers/) under which most samples fell: the answer to "where does the time go".
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

OURS = re.compile(r"^(?P<function>\S+) \((?P<file>(?:app|tasks|providers)/[^:]+):\d+\)$")


def py_spy() -> str:
    found = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if found is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    return found


def record(pid: int, seconds: float, path: Path) -> subprocess.Popen:
    """Sample `pid` and its children for `seconds`, without pausing them, into `path`."""
    command = [py_spy(), "record", "--pid", str(pid), "--subprocesses", "--nonblocking", "--format", "raw"]
    command += ["--duration", str(max(1, round(seconds))), "--output", str(path)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def hot_spots(path: Path, count: int = 3) -> str:
    """`31% load (tasks/prepare.py), …; 40% outside our code`: each sample is counted under
    the innermost function of ours on its stack (time in the libraries it calls included)."""
    under: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if not samples.isdigit():  # seen once in CI: a stack cut short by a process title py-spy read mid-change
            continue
        total += int(samples)
        ours = [match for frame in stack.split(";") if (match := OURS.match(frame))]
        under[f"{ours[-1]['function']} ({ours[-1]['file']})" if ours else ""] += int(samples)
    if not total:
        return "no samples"
    outside = under.pop("", 0)
    spots = [f"{100 * n / total:.0f}% {function}" for function, n in under.most_common(count)]
    return ", ".join(spots) + f"; {100 * outside / total:.0f}% outside our code"
