"""CPU and memory of each role of the stack, sampled from /proc through psutil; and the
CPU each kind of process spends per notification between two samples.

A role is a process and, usually, its descendants: gunicorn's workers, a Celery pool's
children, PostgreSQL's backends. A process's CPU time moves into its parent's
`children_*` times when it exits and is reaped, so summing own and reaped times over the
live tree counts every second once, even as backends come and go.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

ALL_PROCESSES = "all processes"


@dataclass(frozen=True)
class RoleUsage:
    cpu_percent: float  # of one core, over the last interval
    cpu_seconds: float  # so far: what the role used between two samples is their difference
    rss_mb: float  # the tree's resident memory (shared pages are counted in every process)


class Role:
    """A process, with its descendants or (for the load generator, whose children are the
    stack) alone."""

    def __init__(self, pid: int, descendants: bool = True):
        self.root = psutil.Process(pid)
        self.descendants = descendants

    def processes(self) -> list[psutil.Process]:
        if not self.descendants:
            return [self.root]
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def totals(self) -> tuple[float, int]:
        """CPU seconds so far (with reaped children's, for a tree) and resident bytes."""
        cpu, rss = 0.0, 0
        for process in self.processes():
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    cpu += times.user + times.system
                    if self.descendants:
                        cpu += times.children_user + times.children_system
                    rss += process.memory_info().rss
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                continue
        return cpu, rss


class Usage:
    """Each role's CPU share since the previous sample, and its RSS now."""

    def __init__(self, roles: dict[str, Role]):
        self.roles = roles
        self.last = {name: role.totals()[0] for name, role in roles.items()}
        self.at = time.monotonic()

    def sample(self) -> dict[str, RoleUsage]:
        now = time.monotonic()
        elapsed = max(now - self.at, 1e-6)
        sample = {}
        for name, role in self.roles.items():
            cpu, rss = role.totals()
            sample[name] = RoleUsage(100 * max(cpu - self.last[name], 0.0) / elapsed, cpu, rss / 1e6)
            self.last[name] = cpu
        self.at = now
        return sample


def ms_per_notification(
    before: Mapping[str, RoleUsage], after: Mapping[str, RoleUsage], kinds: Mapping[str, str], notifications: int
) -> dict[str, float]:
    """CPU milliseconds per notification for each kind of process between two samples (the
    roles of one kind add up; kinds in the order `kinds` first names them), and over all
    processes last, under ALL_PROCESSES."""
    if notifications <= 0:
        raise ValueError("CPU per notification needs at least one notification")
    seconds: dict[str, float] = {}
    for role, kind in kinds.items():
        used = max(after[role].cpu_seconds - before[role].cpu_seconds, 0.0)
        seconds[kind] = seconds.get(kind, 0.0) + used
    seconds[ALL_PROCESSES] = sum(seconds.values())
    return {kind: 1000 * used / notifications for kind, used in seconds.items()}
