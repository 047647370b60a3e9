"""A `tidings` process gives a freed large block back to the system, however large the last one was."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's malloc only")

# Where two 4 MiB blocks, one allocated after the other was freed, live: their own mapping or the heap.
PROBE = """
import ctypes, json, os
from app.runtime.memory import tune_malloc
if os.environ.get("TUNE"):
    tune_malloc(os.environ)
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]

def mapping_of(address):
    for line in open("/proc/self/maps"):
        span, *fields = line.split()
        low, high = (int(part, 16) for part in span.split("-"))
        if low <= address < high:
            return fields[4] if len(fields) > 4 else "own"

places = []
for _ in range(2):
    block = libc.malloc(4 << 20)
    places.append(mapping_of(block))
    libc.free(block)
print(json.dumps(places))
"""


def places(**env: str) -> list[str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env={**inherited, **env}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_untuned_glibc_puts_the_block_after_a_freed_large_one_on_the_heap():
    assert places() == ["own", "[heap]"]


def test_tuned_every_large_block_has_a_mapping_of_its_own_given_back_when_freed():
    assert places(TUNE="1") == ["own", "own"]


def test_an_operators_threshold_stands():
    assert places(TUNE="1", MALLOC_MMAP_THRESHOLD_=str(8 << 20)) == ["[heap]", "[heap]"]
