"""The single-send benchmark, run small: both throughput runs and the end-to-end run, nothing lost."""

from __future__ import annotations

import re

from tests.loadtest.scripts import run_script

# A busy machine sends late; the patience of 15 times the planned 2 s lets it send every slot all the same.
ARGS = ["--clients", "4", "--seconds", "2", "--rate", "20", "--e2e-seconds", "2", "--patience", "15", "--no-append"]
# What each run says after its count of accepted sends.
RATE = r"accepted in [\d.]+ s = \d+ req/s, p50 [\d.]+ ms, p99 [\d.]+ ms; errors: none"


def test_the_load_reports_rates_latencies_and_backlog_and_loses_nothing(bench_env):
    out = run_script("singles.py", *ARGS, env=bench_env)
    end_to_end = re.search(rf"^end to end at 20/s for 2 s \(4 clients; .*, skipped: (\d+)\): (\d+) {RATE}$", out, re.M)
    assert end_to_end, out
    skipped, accepted = map(int, end_to_end.groups())
    assert (accepted, skipped) == (40, 0), f"{accepted} of 40 accepted, {skipped} skipped past the patience:\n{out}"
    assert re.search(r"^  accept → sent: p50 \d+ ms, p99 \d+ ms, max \d+ ms$", out, re.M)
    assert "  statuses: sent 40; lost: 0" in out, out
    assert re.search(r"^  backlog \(not yet terminal, once a second\):( \d+)+$", out, re.M)
    assert_both_servers_answered(out, "gunicorn")


def test_under_granian_ours_and_the_bare_endpoint_answer_and_nothing_is_lost(bench_env):
    out = run_script("singles.py", *ARGS, "--e2e-seconds", "0", "--server", "granian", env=bench_env)
    assert out.startswith("API: granian, 2 workers;"), out
    assert "end to end" not in out
    assert_both_servers_answered(out, "granian")


def assert_both_servers_answered(out: str, server: str) -> None:
    """Ours answered every send it was given without error, all stored; the bare endpoint too."""
    ours = re.search(rf"^ours, 4 clients for 2 s: (\d+) {RATE}$", out, re.M)
    assert ours, out
    assert f"  stored: {ours.group(1)} of {ours.group(1)} answered, 0 lost" in out
    bare = rf"^bare endpoint \(one INSERT \+ one publish, same {server} settings\): \d+ {RATE}$"
    assert re.search(bare, out, re.M), out
    assert re.search(r"^ours / bare: [\d.]+$", out, re.M)
