"""The soak, run tiny: the whole stack, a fixed rate, retries, opens and clicks, the figures,
the plot, and nothing lost."""

from __future__ import annotations

import csv
import os
import re
import shutil
import sys
from pathlib import Path

from tests.loadtest.scripts import run_script

# Where soak.py looks for it: beside this Python (a virtualenv's bin), then on the PATH.
PY_SPY = shutil.which("py-spy", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))

TINY = [
    *("--rate", "20", "--duration", "15s", "--subscribers", "500"),
    *("--sample-every", "2s", "--settle", "4s", "--open-delay", "2s", "--open-share", "0.5", "--click-share", "0.5"),
    *("--transient-rate", "0.1", "--retry-delay-scale", "0.05", "--api-workers", "1"),
    "--no-record",
]


def soak(bench_env: dict[str, str], *args: str) -> str:
    """Run soak.py to its end; its output."""
    return run_script("soak.py", *args, env=bench_env, timeout=240)


def test_a_tiny_profiled_soak_prints_its_figures_draws_its_plot_names_hot_spots_and_loses_nothing(bench_env, tmp_path):
    assert PY_SPY is not None, "py-spy (a dev dependency) is missing"
    out = soak(bench_env, *TINY, "--workers", "2", "--split-stages", "--profile", "--results", str(tmp_path))
    expected = [
        r"^soak: 20/s for 0m1\d\.\ds, 500 subscribers, 8 templates; API 1 gunicorn workers .*, 2 Celery workers "
        r"x threads \d+, stages split between workers$",
        r"^load: 300 sends, \d+ started late \(> 10 ms, worst [\d.]+ s\); 300 accepted, 0 refused$",
        r"^delivered/s: [\d.]+ overall, [\d.]+ in the second half \(target 20\)$",
        r"^backlog: \d+ at the end, max \d+ after 0m04\.0s$",
        r"^accept→provider: p50 [\d.]+ s, p95 [\d.]+ s, p99 [\d.]+ s \(\d+ of 300 reached the provider\)$",
        r"^API sends: p50 \d+ ms, p95 \d+ ms, p99 \d+ ms$",
        r"^API reads: p50 \d+ ms",
        r"^API inbound webhooks: p50 \d+ ms",
        r"^engagement: [1-9]\d* opens and \d+ clicks posted, 0 refused$",
        r"^provider, whole run: \d+ calls, [1-9]\d* answered 503 \(retried\), 0 messages reached it twice$",
        r"^dead letters: 0$",
        r"^database growth: [\d,]+ bytes per notification",
        r"^lost: 0 \(\d+ terminal, \d+ in flight\)$",
        r"^CPU % of one core \(mean\) and peak RSS: api \d+% \d+ MB, worker1 .*, worker2 .*, redis .*, "
        r"load \d+% \d+ MB$",
        r"^CPU ms per delivered notification, second half \(0m0\d\.\ds, [1-9][\d,]* delivered\): API [\d.]+, "
        r"prepare worker [\d.]+, deliver worker [\d.]+, beat [\d.]+, (?:PostgreSQL [\d.]+, )?Redis [\d.]+, "
        r"fake provider [\d.]+, load generator [\d.]+; all processes [\d.]+ \(\d+ cores allow [\d.]+ at 20/s\)$",
        r"^Row versions written per delivered notification, second half$",
        r"^\| `messages` \| [\d.]*[1-9][\d.]* \| [\d.]+ \| [\d.]+ \| (?:\d+%|—) \| [\d.]+ \|$",
        r"^\| all \d+ tables \| [\d.]*[1-9][\d.]* \|",
        r"^WAL: [1-9][\d,]* bytes per notification, [\d.]+ whole pages logged \(full-page images\)$",
        # The table when the server preloads pg_stat_statements, else why not.
        r"^(?:statements: .*pg_stat_statements.*|\| all \d+ statements \| [\d.]+ \|.*)$",
    ]
    for pattern in expected:
        assert re.search(pattern, out, re.MULTILINE), f"{pattern!r} not in:\n{out}"
    [plot] = re.findall(r"^plot: (.+)$", out, re.MULTILINE)
    assert Path(plot).parent.parent == tmp_path
    assert Path(plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with (Path(plot).parent / "samples.csv").open() as samples:
        rows = list(csv.DictReader(samples))
    assert len(rows) >= 5
    assert {"backlog", "delivered_per_s", "api_cpu_percent", "worker1_rss_mb"} <= set(rows[0])
    for role in ("api", "worker1", "worker2"):
        found = re.search(rf"^where {role} spends its time: (.+)$", out, re.MULTILINE)
        assert found, out
        spot = r"\d+% [\w.<>]+ \((?:app|tasks|providers)/[\w/]+\.py\)"
        assert re.fullmatch(rf"(?:{spot}, )*{spot}; \d+% outside our code", found[1]), found[1]
    assert list(tmp_path.glob("soak-*/profile-worker1.txt"))


def test_the_ramp_steps_up_until_the_backlog_grows_then_soaks_at_the_rate_that_held(bench_env, tmp_path):
    # Steps of four samples, so each is judged on samples taken wholly inside it. The tiny soak
    # above has every send of 20/s accepted and delivered: a stack that cannot hold 10/s is broken.
    ramp = ["--ramp", "--ramp-start", "10", "--ramp-step", "5", "--step", "8s", "--max-rate", "15"]
    out = soak(bench_env, *TINY, *ramp, "--workers", "1", "--duration", "6s", "--results", str(tmp_path))
    [line] = set(re.findall(r"^ramp: .*$", out, re.MULTILINE))  # printed as it ends, and in the summary
    steps = re.fullmatch(
        r"ramp: ((?:\d+/s held; )*)(\d+/s: fell behind; )?(?:sustainable rate: (\d+)/s|no rate held)", line
    )
    assert steps, line
    held = re.findall(r"(\d+)/s held", steps[1])
    assert held == ["10", "15"][: len(held)], line
    assert held, f"not even 10/s held, so there was no soak:\n{out}"
    assert steps[3] == held[-1]
    # The soak at the rate that held: every send accepted, none lost, none dead.
    rate, sends = int(held[-1]), int(held[-1]) * 6
    assert re.search(rf"^soak: {rate}/s for 0m0\d\.\ds", out, re.MULTILINE), out
    assert re.search(rf"^load: {sends} sends, .*; {sends} accepted, 0 refused$", out, re.MULTILINE), out
    assert re.search(r"^dead letters: 0$", out, re.MULTILINE), out
    assert re.search(r"^lost: 0 \(", out, re.MULTILINE), out
    assert re.search(r"^plot: .+/ramp-[\d-]+/soak\.png$", out, re.MULTILINE), out
