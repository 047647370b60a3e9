"""When the ramp calls a step lost: the backlog grows, or the API accepts less than asked."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from timeline import Sample, fell_behind

EVERY = 10.0  # seconds between samples: at 200/s, growth counts above 50 messages (the floor)


def sample(backlog: int, accepted_per_s: float = 200.0) -> Sample:
    return Sample(
        at=0.0, target=200.0, accepted_per_s=accepted_per_s, delivered_per_s=200.0, backlog=backlog, sending=0, usage={}
    )


def test_a_steady_stack_is_not_behind():
    assert not fell_behind(sample(300), sample(340), EVERY)
    assert not fell_behind(sample(340), sample(200, accepted_per_s=191.0), EVERY)


def test_a_backlog_growing_past_the_threshold_is_behind():
    assert fell_behind(sample(300), sample(351), EVERY)
    assert not fell_behind(sample(300), sample(350), EVERY)


def test_an_api_accepting_less_than_95_percent_is_behind_whatever_the_backlog():
    assert fell_behind(sample(300), sample(100, accepted_per_s=189.0), EVERY)
