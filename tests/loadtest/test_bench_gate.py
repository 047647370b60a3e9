"""The benchmark gate's decisions (best of the rounds, what is measured again and what fails)
on given figures, and its checkout of the base commit in a throwaway git repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from bench_compare import compare
from bench_gate import best, has_benchmarks, resolve, slower, worktree


def test_each_side_keeps_each_benchmarks_lowest_median_over_the_rounds():
    rounds = [
        {"test_render": 90e-6, "test_finalise": 20e-3},
        {"test_render": 80e-6, "test_finalise": 31e-3},
        {"test_render": 120e-6},  # a re-measure round runs only the suspects
    ]
    assert best(rounds) == {"test_render": 80e-6, "test_finalise": 20e-3}
    assert best([]) == {}


def test_only_benchmarks_beyond_the_threshold_are_measured_again():
    base = {"test_render": 80e-6, "test_payload": 400e-6, "test_finalise": 20e-3, "test_retired": 1e-3}
    head = {"test_render": 104e-6, "test_payload": 500e-6, "test_finalise": 10e-3, "test_new": 9.0}
    assert slower(compare(base, head), 25.0) == ["test_render"]  # +30%; +25% exactly and one-sided ones pass
    assert slower(compare(base, head), 20.0) == ["test_render", "test_payload"]


def test_a_suspect_fails_only_if_all_its_rounds_still_find_it_slower():
    """The first rounds found the head 40% slower; the re-measure rounds join them, and each
    side's best over all of them decides."""
    base_rounds = [{"test_render": 100e-6}, {"test_render": 101e-6}]
    noisy_head = [{"test_render": 140e-6}, {"test_render": 150e-6}]
    assert slower(compare(best(base_rounds), best(noisy_head)), 25.0) == ["test_render"]
    quiet_again = [{"test_render": 103e-6}]
    assert slower(compare(best(base_rounds), best(noisy_head + quiet_again)), 25.0) == []
    still_slow = [{"test_render": 139e-6}]
    assert slower(compare(best(base_rounds), best(noisy_head + still_slow)), 25.0) == ["test_render"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """Two commits: the first without benchmarks, the second adds them."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README").write_text("first\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "first")
    (repo / "README").write_text("second\n")
    (repo / "loadtest" / "benchmarks").mkdir(parents=True)
    (repo / "loadtest" / "benchmarks" / "test_x.py").write_text("")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "second")
    return repo


def test_the_base_is_checked_out_apart_and_removed_even_when_the_run_fails(repo):
    first = resolve(repo, "HEAD~1")
    with pytest.raises(RuntimeError), worktree(repo, first) as base:
        assert (base / "README").read_text() == "first\n"
        assert git(base, "rev-parse", "HEAD").strip() == first
        checked_out = base
        raise RuntimeError("a round failed")
    assert not checked_out.parent.exists()
    assert len(git(repo, "worktree", "list").splitlines()) == 1  # git's record of it is gone too
    assert (repo / "README").read_text() == "second\n"


def test_a_base_without_benchmarks_or_outside_the_clone_is_told_apart(repo):
    assert has_benchmarks(repo, resolve(repo, "HEAD"))
    assert not has_benchmarks(repo, resolve(repo, "HEAD~1"))
    assert resolve(repo, "HEAD~2") is None
