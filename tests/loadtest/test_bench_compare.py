"""bench_compare on saved runs written to disk, run as its command line; and the
micro-benchmarks themselves, run once each, so they cannot rot unnoticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "loadtest" / "bench_compare.py"


def save_run(path: Path, medians: dict[str, float], when: str = "2025-03-01T10:00:00+00:00") -> Path:
    """A run in the shape pytest-benchmark saves it (the fields bench_compare reads, and a few more)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    benchmarks = [
        {
            "group": None,
            "name": name,
            "fullname": f"loadtest/benchmarks/test_x.py::{name}",
            "params": None,
            "stats": {"min": median * 0.9, "max": median * 3, "mean": median * 1.2, "median": median, "rounds": 50},
            "extra_info": {},
        }
        for name, median in medians.items()
    ]
    path.write_text(json.dumps({"datetime": when, "version": "5.1.0", "benchmarks": benchmarks}))
    return path


def compare(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60, check=False
    )


def line_of(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(name + " "))


def test_the_same_run_passes(tmp_path):
    run = save_run(tmp_path / "run.json", {"test_render": 80e-6, "test_finalise": 15e-3})
    result = compare(run, run)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "+0.0%" in line_of(result.stdout, "test_render")
    assert "15,000.0" in line_of(result.stdout, "test_finalise")
    assert "none more than 25% slower" in result.stdout


def test_ten_percent_slower_is_reported_but_passes(tmp_path):
    old = save_run(tmp_path / "old.json", {"test_render": 80e-6, "test_payload": 400e-6})
    new = save_run(tmp_path / "new.json", {"test_render": 88e-6, "test_payload": 400e-6})
    result = compare(old, new)
    assert result.returncode == 0, result.stdout + result.stderr
    render = line_of(result.stdout, "test_render")
    assert "80.0" in render and "88.0" in render and "+10.0%" in render
    assert "SLOWER" not in result.stdout


def test_thirty_percent_slower_fails(tmp_path):
    old = save_run(tmp_path / "old.json", {"test_render": 80e-6, "test_payload": 400e-6})
    new = save_run(tmp_path / "new.json", {"test_render": 104e-6, "test_payload": 300e-6})
    result = compare(old, new)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "+30.0%  SLOWER by more than 25%" in line_of(result.stdout, "test_render")
    assert "-25.0%" in line_of(result.stdout, "test_payload")
    assert "1 benchmark(s) more than 25% slower: test_render" in result.stdout


def test_the_threshold_is_an_option(tmp_path):
    old = save_run(tmp_path / "old.json", {"test_render": 80e-6})
    new = save_run(tmp_path / "new.json", {"test_render": 104e-6})
    assert compare(old, new, "--threshold", "40").returncode == 0
    assert compare(old, new, "--threshold", "10").returncode == 1


def test_a_benchmark_in_one_run_only_is_shown_and_never_fails(tmp_path):
    old = save_run(tmp_path / "old.json", {"test_render": 80e-6, "test_retired": 1e-3})
    new = save_run(tmp_path / "new.json", {"test_render": 81e-6, "test_batch_validation": 5e-3})
    result = compare(old, new)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "only in the new run" in line_of(result.stdout, "test_batch_validation")
    assert "only in the old run" in line_of(result.stdout, "test_retired")


def test_without_arguments_the_two_newest_saved_runs_are_compared(tmp_path):
    """Newest by the time each run records, whatever the files are called."""
    machine = tmp_path / "Linux-CPython-3.11-64bit"
    save_run(machine / "0001_a.json", {"test_render": 10e-6}, when="2025-03-01T10:00:00+00:00")
    newest = save_run(machine / "0002_b.json", {"test_render": 130e-6}, when="2025-03-03T10:00:00+00:00")
    before = save_run(machine / "0003_c.json", {"test_render": 100e-6}, when="2025-03-02T10:00:00+00:00")
    result = compare("--storage", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"old: {before}\nnew: {newest}" in result.stdout
    assert "+30.0%" in line_of(result.stdout, "test_render")


def test_without_two_saved_runs_it_says_so(tmp_path):
    save_run(tmp_path / "machine" / "0001_a.json", {"test_render": 10e-6})
    result = compare("--storage", tmp_path)
    assert result.returncode == 2
    assert "fewer than two saved runs" in result.stderr


def test_every_micro_benchmark_runs(tmp_path):
    """Each benchmark once, untimed (--benchmark-disable), the database one on an embedded
    PostgreSQL of its own: the benchmarks' session drops and migrates its schema, so it
    must not be given this session's DATABASE_URL."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "loadtest" / "benchmarks"),
            "--benchmark-disable",
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=ROOT,
        env={key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout and "failed" not in result.stdout
