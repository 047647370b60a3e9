"""Compare two saved micro-benchmark runs and fail when one got much slower.

    python loadtest/bench_compare.py                     # the two newest runs `make bench` saved
    python loadtest/bench_compare.py OLD.json NEW.json [--threshold 25]

Benchmarks are matched by name and compared on their median. The median, not the mean:
on a shared machine a few rounds land on a busy core or a garbage collection and drag
the mean with them, while the median stays with the typical round, so it is the figure
that moves when the code, not the neighbourhood, changed.

Prints every benchmark (old, new, change) and exits 1 when any is more than the threshold
slower (default 25%: shared machines vary by 10-20% between runs, so smaller changes are
shown but do not fail). A benchmark present in one run only is shown and never fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STORAGE = Path(__file__).resolve().parent / "results" / "benchmarks"
DEFAULT_THRESHOLD = 25.0


@dataclass(frozen=True)
class Change:
    """One benchmark's median in both runs, in seconds; None where the run lacks it."""

    name: str
    old: float | None
    new: float | None

    @property
    def percent(self) -> float | None:
        if self.old is None or self.new is None:
            return None
        return (self.new - self.old) / self.old * 100

    def slower_than(self, threshold: float) -> bool:
        return self.percent is not None and self.percent > threshold


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def medians(run: Mapping[str, Any]) -> dict[str, float]:
    """Each benchmark's median in seconds, by name."""
    return {benchmark["name"]: benchmark["stats"]["median"] for benchmark in run["benchmarks"]}


def saved_runs(storage: Path = STORAGE) -> list[Path]:
    """Every run pytest-benchmark saved under `storage` (one folder per machine), oldest first
    by the time each run records, so runs copied between folders keep their order."""
    return sorted(storage.glob("*/*.json"), key=lambda path: load(path)["datetime"])


def compare(old: Mapping[str, float], new: Mapping[str, float]) -> list[Change]:
    """Every benchmark of either run, in the order the new run (then the old) lists them."""
    names = list(new) + [name for name in old if name not in new]
    return [Change(name, old.get(name), new.get(name)) for name in names]


def table(changes: Sequence[Change], threshold: float) -> str:
    width = max([len("benchmark"), *(len(c.name) for c in changes)])
    lines = [f"{'benchmark':<{width}}  {'old µs':>12}  {'new µs':>12}  {'change':>8}"]
    for change in changes:
        lines.append(
            f"{change.name:<{width}}  {_micro(change.old):>12}  {_micro(change.new):>12}  "
            f"{_percent(change.percent):>8}  {_verdict(change, threshold)}".rstrip()
        )
    return "\n".join(lines)


def _micro(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.1f}"


def _percent(percent: float | None) -> str:
    return "" if percent is None else f"{percent:+.1f}%"


def _verdict(change: Change, threshold: float) -> str:
    if change.old is None:
        return "only in the new run"
    if change.new is None:
        return "only in the old run"
    return f"SLOWER by more than {threshold:g}%" if change.slower_than(threshold) else ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, metavar="RUN.json", help="old and new run (default: newest two)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="percent slower that fails")
    parser.add_argument("--storage", type=Path, default=STORAGE, help="where `make bench` saves its runs")
    args = parser.parse_args(argv)
    if len(args.runs) not in (0, 2):
        parser.error("give two runs (old, new), or none for the two newest saved ones")
    runs = args.runs or saved_runs(args.storage)[-2:]
    if len(runs) < 2:
        parser.error(f"fewer than two saved runs in {args.storage}: run `make bench` twice")
    old_path, new_path = runs
    print(f"old: {old_path}\nnew: {new_path}\n")
    changes = compare(medians(load(old_path)), medians(load(new_path)))
    print(table(changes, args.threshold))
    slower = [c.name for c in changes if c.slower_than(args.threshold)]
    if slower:
        print(f"\n{len(slower)} benchmark(s) more than {args.threshold:g}% slower: {', '.join(slower)}")
        return 1
    print(f"\nnone more than {args.threshold:g}% slower")
    return 0


if __name__ == "__main__":
    sys.exit(main())
