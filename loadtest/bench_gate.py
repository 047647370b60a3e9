"""`make bench-gate`: fail CI when a micro-benchmark runs more than 25% slower than on the commit before.

    python loadtest/bench_gate.py [BASE] [--rounds 5] [--remeasure-rounds 5] [--max-time 0.1] [--threshold 25]

The base commit (HEAD~1 unless given) is checked out into a temporary git worktree, and the
benchmarks of both trees run here, in the same run, in interleaved rounds (base, head, base,
head, ...): a neighbour that loads the machine for a while slows both sides, not one. Each
round is a pytest process of its own whose working directory and PYTHONPATH are its tree,
so it imports that tree's code before the virtualenv's editable install of this one; the
round prints where its `app` came from, and the gate stops if it is not its tree.

Time is the CPU time of the round's process (time.process_time), not the wall clock: on a
shared machine a process waits for a core as long as its neighbours keep them busy, and that
wait is in the wall clock, not in the code. (Same code on both sides, 2 cores at a load of 20:
wall-clock medians up to 30% apart, CPU-time ones within 15%; at a load of 50, within 20%.)
What another process does for a benchmark, PostgreSQL's share of test_finalise_500, is not
in it: `make bench` has that.
Each benchmark's figure per side is its best median over the rounds: noise only ever adds
time, so the fastest typical round is the one closest to what the code costs. Benchmarks
more than the threshold slower are measured again, alone (-k), for a few more interleaved
rounds, and fail only if they are still slower over all rounds. A benchmark present in one
tree only is shown and never fails; a base commit without benchmarks passes, saying so.
PostgreSQL and Redis come from DATABASE_URL / REDIS_URL, or are embedded for the whole gate.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench_compare import DEFAULT_THRESHOLD, Change, compare, medians, table
from harness import servers

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = "loadtest/benchmarks"  # in either tree
# A round's process: pytest, then the file its `app` was imported from, for the gate to check.
APP_MARK = "bench-gate: app imported from "
ROUND = (
    "import sys, pytest\n"
    "code = pytest.main(sys.argv[1:])\n"
    f"print({APP_MARK!r} + str(getattr(sys.modules.get('app'), '__file__', None)))\n"
    "sys.exit(code)\n"
)
ROUND_TIMEOUT = 300.0

Medians = dict[str, float]  # one round's medians in seconds, by benchmark name


@dataclass(frozen=True)
class Tree:
    """One side of the comparison: a name for the log and the checkout whose code it runs."""

    side: str
    path: Path


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def resolve(repo: Path, revision: str) -> str | None:
    """The commit `revision` names, or None where the clone does not have it (a shallow one)."""
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() or None


def has_benchmarks(repo: Path, commit: str) -> bool:
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{commit}:{BENCHMARKS}"], cwd=repo, capture_output=True, check=False
    )
    return found.returncode == 0


@contextmanager
def worktree(repo: Path, commit: str) -> Iterator[Path]:
    """`commit` checked out, detached, in a temporary directory that is gone again afterwards,
    along with git's record of it, whatever happens in between."""
    directory = Path(tempfile.mkdtemp(prefix="bench-gate-"))
    path = directory / "base"
    try:
        git(repo, "worktree", "add", "--detach", str(path), commit)
        yield path
    finally:
        removed = subprocess.run(
            ["git", "worktree", "remove", "--force", str(path)], cwd=repo, capture_output=True, check=False
        )
        shutil.rmtree(directory, ignore_errors=True)
        if removed.returncode != 0:  # never made, or its files went first: git's record of it goes too
            git(repo, "worktree", "prune")


def best(rounds: Sequence[Medians]) -> Medians:
    """Each benchmark's lowest median over the rounds that measured it."""
    lowest: Medians = {}
    for measured in rounds:
        for name, median in measured.items():
            lowest[name] = min(median, lowest.get(name, median))
    return lowest


def slower(changes: Sequence[Change], threshold: float) -> list[str]:
    """The benchmarks to measure again, or, after that, the ones that fail."""
    return [change.name for change in changes if change.slower_than(threshold)]


class Gate:
    """The rounds of one run: where each side's results go and how each round is run."""

    def __init__(self, work: Path, env: Mapping[str, str], max_time: float):
        self.work, self.env, self.max_time = work, env, max_time
        self.count = 0

    def interleaved(
        self, trees: Sequence[Tree], rounds: int, only: Sequence[str] = ()
    ) -> dict[str, list[dict[str, float]]]:
        """`rounds` rounds of each tree, alternating, each tree's medians per round."""
        measured: dict[str, list[Medians]] = {tree.side: [] for tree in trees}
        for _ in range(rounds):
            for tree in trees:
                measured[tree.side].append(self.round(tree, only))
        return measured

    def round(self, tree: Tree, only: Sequence[str]) -> Medians:
        """One pytest run of the tree's benchmarks (of `only`, when given): their medians."""
        self.count += 1
        output = self.work / f"round-{self.count}.json"
        args = [BENCHMARKS, "-q", "-p", "no:cacheprovider", f"--basetemp={self.work / f'tmp-{self.count}'}"]
        args += ["--benchmark-timer=time.process_time", f"--benchmark-max-time={self.max_time}"]
        args.append(f"--benchmark-json={output}")
        if only:
            args += ["-k", " or ".join(only)]
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", ROUND, *args],
            cwd=tree.path,
            env={**self.env, "PYTHONPATH": str(tree.path)},
            capture_output=True,
            text=True,
            timeout=ROUND_TIMEOUT,
            check=False,
        )
        app = next((line.removeprefix(APP_MARK) for line in done.stdout.splitlines() if line.startswith(APP_MARK)), "")
        results = medians(json.loads(output.read_text())) if output.exists() else {}
        took = time.monotonic() - started
        print(f"round {self.count:>2} {tree.side}: {len(results)} benchmarks in {took:.1f} s, app from {app}")
        if app not in ("", "None") and not Path(app).is_relative_to(tree.path):
            raise SystemExit(f"the {tree.side} round imported app from {app}, not from {tree.path}: nothing to compare")
        if done.returncode != 0:
            print(done.stdout[-5000:] + done.stderr[-5000:])
            if tree.side == "head":
                raise SystemExit(f"the head's benchmarks failed (pytest exited with {done.returncode})")
            print("the base's benchmarks failed: only the ones it measured are compared")
        return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", nargs="?", default="HEAD~1", help="the commit to compare with (default HEAD~1)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per tree")
    parser.add_argument("--remeasure-rounds", type=int, default=5, help="more rounds for a benchmark found slower")
    parser.add_argument("--max-time", type=float, default=0.1, help="seconds each benchmark runs per round")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="percent slower that fails")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        return gate(args)
    finally:
        print(f"\nbench-gate took {time.monotonic() - started:.0f} s")


def gate(args: argparse.Namespace) -> int:
    commit = resolve(ROOT, args.base)
    if commit is None:
        print(f"{args.base} is not in this clone: nothing to compare with, the gate passes")
        return 0
    print(f"base: {args.base} = {git(ROOT, 'log', '-1', '--format=%h %s', commit)}\nhead: this working tree, {ROOT}")
    if not has_benchmarks(ROOT, commit):
        print(f"the base has no {BENCHMARKS}: nothing to compare with, the gate passes")
        return 0
    with servers() as urls, worktree(ROOT, commit) as base, tempfile.TemporaryDirectory(prefix="bench-gate-") as work:
        trees = [Tree("base", base), Tree("head", ROOT)]
        run = Gate(Path(work), {**os.environ, **urls}, args.max_time)
        rounds = run.interleaved(trees, args.rounds)
        changes = compare(best(rounds["base"]), best(rounds["head"]))
        print(f"\nCPU µs, old = base, new = head: best median of {args.rounds} rounds each")
        print(table(changes, args.threshold))
        suspects = slower(changes, args.threshold)
        if suspects:
            print(f"\nmeasuring again, {args.remeasure_rounds} more rounds each: {', '.join(suspects)}")
            for side, more in run.interleaved(trees, args.remeasure_rounds, suspects).items():
                rounds[side] += more
            changes = [c for c in compare(best(rounds["base"]), best(rounds["head"])) if c.name in suspects]
            print(f"\nagain, best median over all rounds\n{table(changes, args.threshold)}")
    failed = slower(changes, args.threshold)
    if failed:
        print(f"\n{len(failed)} benchmark(s) more than {args.threshold:g}% slower than the base: {', '.join(failed)}")
        return 1
    print(f"\nnone more than {args.threshold:g}% slower than the base")
    return 0


if __name__ == "__main__":
    sys.exit(main())
