"""`make loadtest`: Locust, headless, against the whole stack on this machine.

    python loadtest/locust_run.py --rate 100 --users 50 --duration 60s

Sets up what the soak does (a project and key, subscribers, 8 templates, the fake provider
at 150 to 250 ms a call with 3% of calls answered 503, the stack as processes), then runs
`loadtest/locustfile.py` headless at a fixed rate of tasks for the duration. Locust's CSV
files and HTML report go to loadtest/results/locust-<time>/. It prints Locust's figures per
route, what reached the provider, and each process's CPU over the run, and appends them
to BENCHMARKS.md (unless --no-record). The exit status is Locust's: 1 when a request failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

import requests
from report import append_section
from usage import Role, RoleUsage, Usage
from workload import Setup, add_setup_arguments, clock, duration, layout_from, set_up

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
RUN_TIMEOUT = 120  # seconds beyond the duration before a hung Locust is given up on


def run_locust(setup: Setup, args: argparse.Namespace, out: Path) -> tuple[int, dict[str, RoleUsage]]:
    """Locust's exit status, and each process's CPU and memory over its run (Locust's own included)."""
    command = [
        *(sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary"),
        *("--users", str(args.users), "--spawn-rate", str(args.users)),
        *("--run-time", f"{round(args.duration)}s", "--stop-timeout", "10", "--host", setup.stack.api_url),
        *("--csv", str(out / "locust"), "--html", str(out / "locust.html"), "--json-file", str(out / "locust")),
    ]
    env = {
        **os.environ,
        "TIDINGS_API_KEY": setup.workload.key,
        "TIDINGS_ADMIN_KEY": setup.stack.env["TIDINGS_ADMIN_KEY"],
        "TIDINGS_SUBSCRIBERS": str(setup.workload.subscribers),
        "TIDINGS_TEMPLATES": ",".join(setup.workload.templates),
        "LOCUST_RATE": str(args.rate),
    }
    locust = subprocess.Popen(command, env=env)
    usage = Usage({**setup.roles(), "locust": Role(locust.pid)})
    try:
        status = locust.wait(timeout=args.duration + RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        locust.kill()
        raise
    return status, usage.sample()


def percentile(histogram: Counter[int], share: float) -> int:
    """The response time (ms) within which `share` of the requests finished, from Locust's
    histogram of rounded times."""
    wanted, seen = share * sum(histogram.values()), 0
    for milliseconds in sorted(histogram):
        seen += histogram[milliseconds]
        if seen >= wanted:
            return milliseconds
    return 0


def route_lines(stats_json: Path, seconds: float) -> list[str]:
    """One line per route and one for them all, from the statistics Locust saves as it exits
    (its CSV files are rewritten once a second, so they miss the last requests)."""
    entries = json.loads(stats_json.read_text())
    routes = [(f"{e['method']} {e['name']}", e) for e in sorted(entries, key=lambda e: (e["name"], e["method"]))]
    everything = {
        "num_requests": sum(e["num_requests"] for e in entries),
        "num_failures": sum(e["num_failures"] for e in entries),
        "response_times": sum((Counter(e["response_times"]) for e in entries), Counter()),
    }
    lines = []
    for route, entry in [*routes, ("all routes", everything)]:
        histogram = Counter({int(ms): n for ms, n in entry["response_times"].items()})
        p50, p95, p99 = (percentile(histogram, share) for share in (0.50, 0.95, 0.99))
        lines.append(
            f"{route}: {entry['num_requests']:,} requests, {entry['num_failures']:,} failed, "
            f"{entry['num_requests'] / seconds:.1f}/s, p50 {p50} ms, p95 {p95} ms, p99 {p99} ms"
        )
    return lines


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=100, help="Locust tasks per second, all users (default 100)")
    parser.add_argument("--users", type=int, default=50, help="Locust users sharing the rate (default 50)")
    parser.add_argument("--duration", type=duration, default=60, help="how long: 30s, 5m (default 60s)")
    add_setup_arguments(parser)
    args = parser.parse_args(argv)
    if not (0 < args.rate <= 10_000 and 1 <= args.users <= 1_000 and args.subscribers >= 1):
        parser.error("need 0 < rate <= 10,000, 1 to 1,000 users and at least one subscriber")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = args.results / f"locust-{datetime.now():%Y%m%d-%H%M%S}"
    with set_up("locust", args, out) as setup:
        status, usage = run_locust(setup, args, out)
        at_provider = requests.get(f"{setup.provider_url}/ledger", timeout=60).json()["accepted"]
    lines = [
        f"locust: {args.rate:g} tasks/s from {args.users} users for {clock(args.duration)}; "
        f"{layout_from(args).describe()}",
        *route_lines(out / "locust.json", args.duration),
        f"provider: {at_provider:,} messages accepted ({at_provider / args.duration:,.0f}/s of the run time)",
        "CPU % of one core (mean): " + ", ".join(f"{role} {use.cpu_percent:.0f}%" for role, use in usage.items()),
        f"report: {out / 'locust.html'}",
    ]
    print("\n".join(lines))
    if not args.no_record:
        append_section(f"Locust at {args.rate:g} tasks/s", "\n".join(f"- {line}" for line in lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
