"""`make bench`: run the micro-benchmarks, save the run, print it and append it to BENCHMARKS.md.

    python loadtest/bench.py [pytest options, e.g. --benchmark-max-time=0.2 or -k payload]

The run is saved under loadtest/results/benchmarks (pytest-benchmark's autosave), where
`loadtest/bench_compare.py` finds the two newest to compare. The summary gives each
benchmark's median, operations per second (1 / median, as the comparison uses the median)
and, for the benchmarks over a batch, the median per message or row.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from bench_compare import STORAGE, load, saved_runs
from report import append_section

BENCHMARKS = Path(__file__).resolve().parent / "benchmarks"


def summary(run: Mapping[str, Any]) -> str:
    """The run as a Markdown table."""
    lines = ["| benchmark | median µs | ops/s | items | µs per item |", "|---|---:|---:|---:|---:|"]
    for benchmark in run["benchmarks"]:
        median = benchmark["stats"]["median"]
        items = benchmark["extra_info"].get("items", 1)
        lines.append(
            f"| {benchmark['name']} | {median * 1e6:,.1f} | {1 / median:,.0f} | {items} | {median * 1e6 / items:,.1f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    before = set(saved_runs())
    code = pytest.main([str(BENCHMARKS), "--benchmark-autosave", f"--benchmark-storage=file://{STORAGE}", *argv])
    saved = [path for path in saved_runs() if path not in before]
    if code != 0 or not saved:
        # A partial run is not kept: it would be the baseline of the next comparison.
        for path in saved:
            path.unlink()
        print(f"no complete run saved (pytest exited with {code}): nothing appended to BENCHMARKS.md")
        return int(code) or 1
    body = summary(load(saved[-1]))
    print(f"\n{body}\n\nsaved as {saved[-1]}; `make bench-compare` compares it with the run before")
    append_section("Micro-benchmarks (`make bench`)", body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
