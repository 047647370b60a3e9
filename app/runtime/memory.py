"""Tune glibc's malloc when a `tidings` process starts, so memory a request or task frees goes back.

glibc serves an allocation of 128 KiB or more from a mapping of its own, unmapped when freed,
but raises that threshold to the size of each such block freed (up to 32 MiB): after one
request with a 10 MiB file, later ones come from the heap, whose freed pages stay resident.
And each thread may take an arena of its own (up to 8 per core), each keeping what it freed.
A fixed threshold of 1 MiB and two arenas let the API's and workers' memory come back down
after large bodies and batches (figures in BENCHMARKS.md). Where the operator set glibc's own
variables (MALLOC_MMAP_THRESHOLD_, MALLOC_ARENA_MAX), theirs stand; elsewhere than glibc, nothing.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Mapping

M_MMAP_THRESHOLD = -3  # mallopt's parameters, from glibc's malloc.h
M_ARENA_MAX = -8
TUNING = {"MALLOC_MMAP_THRESHOLD_": (M_MMAP_THRESHOLD, 1024 * 1024), "MALLOC_ARENA_MAX": (M_ARENA_MAX, 2)}


def tune_malloc(env: Mapping[str, str]) -> None:
    """Set each of TUNING's parameters that `env` does not set itself; children forked later inherit them."""
    if platform.libc_ver()[0] != "glibc":
        return
    libc = ctypes.CDLL("libc.so.6")
    for variable, (parameter, value) in TUNING.items():
        if variable not in env:
            libc.mallopt(parameter, value)
