"""Reading py-spy's collapsed stacks: samples under the innermost function of ours."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from hotspots import hot_spots


def test_samples_count_under_our_innermost_function_and_a_cut_line_is_skipped(tmp_path):
    profile = tmp_path / "profile-worker1.txt"
    profile.write_text(
        'process 7:"python -m app.runtime.cli worker";run (tasks/prepare.py:60);load (app/delivery/store.py:9) 3\n'
        'process 7:"python -m app.runtime.cli worker";run (tasks/prepare.py:60);json (json/__init__.py:1) 1\n'
        'process 7:"python -m app.runtime.cli worker";poll (kombu/utils.py:3) 4\n'
        'process 7:"python -m app.runtime.cli worker -Q prepare.bulk,webhooks,beat";\n'
    )
    assert hot_spots(profile) == "38% load (app/delivery/store.py), 12% run (tasks/prepare.py); 50% outside our code"
