"""Which of the noisy-neighbour soak's phases a run takes: the baseline, then those named, in order."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from neighbour import PHASES, parse, phase_names


def test_every_phase_by_default():
    assert parse([]).phases == PHASES


def test_named_phases_follow_the_baseline_in_their_usual_order():
    assert phase_names("attachments, flood") == ("baseline", "flood", "attachments")


def test_an_unknown_phase_is_refused_naming_the_phases():
    with pytest.raises(argparse.ArgumentTypeError, match="no phase floods; the phases are baseline, compile"):
        phase_names("floods")
