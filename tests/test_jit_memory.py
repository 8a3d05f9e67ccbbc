"""The JIT's code stays within reach of its constants (src/jit_memory.h).

With LLVM's default memory manager, an object's code and its read-only data were mapped
separately, wherever mmap found room; in a process whose address space has holes (a
long test session, PyTorch's libraries, code removed from the JIT) they could land more
than 2 GiB apart, and the code's 32-bit PC-relative loads of its constants then pointed
elsewhere: the process died (SIGSEGV) in the derivative's first call. That is what
crashed the full test suite after split-mode calls and with dropped code unloaded. Here
a child process makes such an address space on purpose: every gap between its mappings
filled, 3 GiB reserved below them, then a one-page hole high up, so that the next two
mappings (code, then constants) would be more than 3 GiB apart.
"""

from __future__ import annotations

import platform
import sys

import pytest

from conftest import run_python

pytestmark = [
    pytest.mark.needs_enzyme,
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or platform.machine() != "x86_64",
        reason="the address-space layout this test makes is Linux x86-64's",
    ),
]

CHILD = r"""
import ctypes
import enzyme_py as ez

IR = (
    "define double @f(double %x) {\n  %y = fmul double %x, 1.2345\n"
    "  %z = fmul double %y, C\n  ret double %z\n}\n"
)

def make(c):
    return ez.autodiff(ez.llvm_ir(IR.replace("C", repr(c)), "f"), ez.Reverse, ez.Active, ez.Active)

assert abs(make(0.5)(1.0, 1.0)[1] - 1.2345 * 0.5) < 1e-12  # the JIT is up

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PRIVATE, ANONYMOUS, NORESERVE, FIXED_NOREPLACE = 0x02, 0x20, 0x4000, 0x100000
FLAGS = PRIVATE | ANONYMOUS | NORESERVE

def mappings():
    spans = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            words = line.split()
            lo, hi = (int(v, 16) for v in words[0].split("-"))
            spans.append((lo, hi, words[-1] if len(words) > 5 else ""))
    return sorted(spans)

fillers = []

def fill_gaps():
    # Every gap between the mappings above the heap filled (not the big one below).
    spans = mappings()
    heap_end = max((hi for lo, hi, name in spans if name == "[heap]"), default=0)
    stack = min(lo for lo, hi, name in spans if name == "[stack]")
    inside = [(lo, hi) for lo, hi, name in spans if heap_end <= lo < stack]
    for (_, end), (start, _) in zip(inside, inside[1:]):
        if 0 < start - end < (64 << 30):
            got = libc.mmap(end, start - end, 0, FLAGS | FIXED_NOREPLACE, -1, 0)
            if got == end:
                fillers.append((end, start - end))

fill_gaps()
assert fillers, "no gaps to fill"
below = libc.mmap(None, 3 << 30, 0, FLAGS, -1, 0)
assert below not in (None, ctypes.c_void_p(-1).value), "no 3 GiB to reserve"
fill_gaps()  # the one a large mapping's alignment leaves above it
hole = max(fillers)
page = hole[0] + hole[1] - 4096
libc.munmap(page, 4096)
assert page - below > (2 << 30), (hex(page), hex(below))
for i in range(4):
    c = 2.0 + i
    assert abs(make(c)(1.0, 1.0)[1] - 1.2345 * c) < 1e-12, i
print("RESULT ok", hex(page), hex(below))
"""


def test_code_and_its_constants_stay_within_reach_in_a_fragmented_address_space():
    proc = run_python(CHILD, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "RESULT ok" in proc.stdout


FILL = r"""
import ctypes, gc
import enzyme_py as ez
from enzyme_py import _native

IR = ("define double @f(double %x) {\n  %y = fmul double %x, C\n"
      "  %z = fmul double %y, %x\n  ret double %z\n}\n")

def make(c):
    return ez.autodiff(ez.llvm_ir(IR.replace("C", repr(c)), "f"), ez.Reverse, ez.Active, ez.Active)

def reservation():
    out = (ctypes.c_uint64 * 5)()
    ctypes.CDLL(_native.__file__).enzyme_py_jit_reservation(out)
    return list(out)

held = []
for i in range(2000):
    try:
        df = make(1.0 + i)
    except MemoryError as exc:
        print("RESULT full after", i, reservation(), exc)
        break
    assert df(1.5, 1.0)[1] == 3.0 * (1.0 + i)
    held.append(df)
else:
    raise SystemExit("never full")
assert reservation()[0] == 1 << 20
assert all(d(1.5, 1.0)[1] == 3.0 * (1.0 + i) for i, d in enumerate(held))  # still loaded
del held, df
gc.collect()
# Dropped: their code makes room for new derivatives (the retry lets go of the recent ones).
for j in range(40):
    assert make(-1.0 - j)(1.5, 1.0)[1] == 3.0 * (-1.0 - j)
print("RESULT again", reservation())
"""


def test_a_full_reservation_is_a_memory_error_and_frees_up_again():
    # A reservation of 1 MiB (ENZYME_PY_JIT_RESERVATION_MIB) fills after ~120
    # derivatives held at once. RuntimeDyld aborted the process there ("LLVM ERROR:
    # Unable to allocate section memory!"); now the load is refused before it starts.
    proc = run_python(
        FILL,
        env={"ENZYME_PY_JIT_RESERVATION_MIB": "1", "ENZYME_PY_DISK_CACHE": "0"},
        timeout=600,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])
    assert "RESULT full after" in proc.stdout, proc.stdout
    assert "the JIT's code reservation is full" in proc.stdout
    assert "ENZYME_PY_JIT_RESERVATION_MIB" in proc.stdout
    assert "RESULT again" in proc.stdout
