"""Long-running memory measurements (issue 22): what a process keeps of what it drops.

    python scripts/memory_run.py ir [N]        N distinct LLVM IR derivatives built, called, dropped
    python scripts/memory_run.py c [N]         the same for C functions (ez.c)
    python scripts/memory_run.py numba [N]     N distinct Numba closures, ez.grad of each
    python scripts/memory_run.py numba-only [N]  the same closures, compiled and called
                                               without enzyme_py (Numba's own share)
    python scripts/memory_run.py tapes [N]     N ez.vjp calls (and N ReverseSplit forward
                                               halves) whose pullbacks are never called
    python scripts/memory_run.py fill [MIB]    a JIT reservation of MIB MiB filled
                                               (ENZYME_PY_JIT_RESERVATION_MIB), then emptied

Each prints one JSON line: RSS (VmRSS after gc and malloc_trim) before and after, the
growth per item, seconds, and the JIT reservation (src/jit_memory.cpp: its size, bytes
allocated, bytes committed, free ranges, the largest). Split mode and code unloading are
on, as shipped. Use a cache folder of its own (ENZYME_PY_CACHE_DIR) to measure builds; a
second run then measures loads from the disk cache.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import sys
import time
from typing import Any

import numpy as np

import enzyme_py as ez

_libc = ctypes.CDLL(None)


def rss_kib() -> int:
    gc.collect()
    _libc.malloc_trim(0)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def reservation() -> dict[str, int]:
    """The JIT reservation's figures (enzyme_py_jit_reservation in src/jit_memory.cpp)."""
    from enzyme_py import _native  # type: ignore[attr-defined]

    lib = ctypes.CDLL(_native.__file__)
    out = (ctypes.c_uint64 * 5)()
    lib.enzyme_py_jit_reservation(out)
    keys = ("size", "allocated", "committed", "free_ranges", "largest_free")
    return dict(zip(keys, (int(v) for v in out), strict=True))


IR = (
    "define double @f(double %x) {{\n  %y = fmul double %x, {c!r}\n"
    "  %z = fmul double %y, %x\n  ret double %z\n}}\n"
)
C = "double f(double x) {{ return {c!r} * x * x; }}\n"


def one_ir(i: int) -> None:
    c = 1.0 + i * 1e-6
    df = ez.autodiff(ez.llvm_ir(IR.format(c=c), "f"), ez.Reverse, ez.Active, ez.Active)
    got = df(1.5, 1.0)[1]
    assert abs(got - 3.0 * c) < 1e-9, (i, got)


def one_c(i: int) -> None:
    c = 1.0 + i * 1e-6
    df = ez.autodiff(ez.c(C.format(c=c)).f, ez.Reverse, ez.Active, ez.Active)
    got = df(1.5, 1.0)[1]
    assert abs(got - 3.0 * c) < 1e-9, (i, got)


def closure(c: float) -> Any:
    import numba

    @numba.njit
    def f(x: Any) -> Any:
        s = 0.0
        for i in range(x.shape[0]):
            s += c * x[i] * x[i]
        return s

    return f


X = np.linspace(0.1, 1.0, 8)


def one_numba(i: int) -> None:
    c = 1.0 + i * 1e-6
    g = ez.grad(closure(c))(X)
    np.testing.assert_allclose(g, 2 * c * X, rtol=1e-12)


def one_numba_only(i: int) -> None:
    c = 1.0 + i * 1e-6
    assert abs(closure(c)(X) - c * float(X @ X)) < 1e-9


def measure(what: str, n: int) -> dict[str, Any]:
    one = {"ir": one_ir, "c": one_c, "numba": one_numba, "numba-only": one_numba_only}[what]
    warm = min(300, max(n // 10, 20))
    for i in range(warm):  # past the memory cache's 256 recent ones, imports done
        one(n + i)
    before = rss_kib()
    jit_before = reservation() if what != "numba-only" else {}
    t0 = time.perf_counter()
    marks = []
    for i in range(n):
        one(i)
        if (i + 1) % max(n // 10, 1) == 0:
            marks.append((i + 1, rss_kib()))
            print(f"{what}: {i + 1} {marks[-1][1]} KiB", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0
    if what != "numba-only":
        one(2 * n + warm)  # the next request releases what was dropped
    after = rss_kib()
    return {
        "what": what,
        "n": n,
        "rss_before_mib": round(before / 1024, 1),
        "rss_after_mib": round(after / 1024, 1),
        "kib_per_item": round((after - before) / n, 2),
        "marks_kib": marks,
        "seconds": round(seconds, 1),
        "jit_before": jit_before,
        "jit_after": reservation() if what != "numba-only" else {},
    }


def tapes(n: int) -> dict[str, Any]:
    import numba

    @numba.njit
    def with_temporary(x: Any) -> Any:
        t = np.sin(x) * x  # a temporary array and its shadow on the tape's arena
        s = 0.0
        for i in range(t.shape[0]):
            s += t[i] * t[i]
        return s

    x = np.linspace(0.1, 1.0, 2000)  # each tape's temporaries: 32 KiB
    split = ez.autodiff(with_temporary, ez.ReverseSplit, ez.Duplicated, ez.Active)
    dx = np.zeros_like(x)
    for _ in range(200):
        ez.vjp(with_temporary, x)
        split.forward(x, dx)
    before = rss_kib()
    t0 = time.perf_counter()
    held = []
    for i in range(n):
        _, pull = ez.vjp(with_temporary, x)  # the pullback never called
        _, tape = split.forward(x, dx)  # the reverse half never run
        if i < 100:
            held.append((pull, tape))
    alive = rss_kib()
    tape_bytes = held[0][1].bytes
    del held
    after = rss_kib()
    return {
        "what": "tapes",
        "n": n,
        "tape_bytes": tape_bytes,
        "rss_before_mib": round(before / 1024, 1),
        "rss_after_mib": round(after / 1024, 1),
        "rss_with_100_held_mib": round(alive / 1024, 1),
        "kib_per_item": round((after - before) / n, 3),
        "seconds": round(time.perf_counter() - t0, 1),
        "would_leak_mib": round(n * 2 * (32 + tape_bytes / 1024) / 1024),
    }


def fill(mib: int) -> dict[str, Any]:
    assert os.environ.get("ENZYME_PY_JIT_RESERVATION_MIB") == str(mib), "set it before"
    held = []
    error = None
    t0 = time.perf_counter()
    i = 0
    while error is None and i < 100_000:
        c = 1.0 + i * 1e-6
        try:
            df = ez.autodiff(ez.llvm_ir(IR.format(c=c), "f"), ez.Reverse, ez.Active, ez.Active)
        except Exception as exc:
            error = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
            break
        assert abs(df(1.5, 1.0)[1] - 3.0 * c) < 1e-9
        held.append(df)
        i += 1
    full = reservation()
    for df in held[:5]:  # what is loaded still works
        df(1.5, 1.0)
    del held, df
    ez.autodiff(ez.llvm_ir(IR.format(c=-1.0), "f"), ez.Reverse, ez.Active, ez.Active)
    gc.collect()
    # Dropped: the next request releases them (beyond the 256 recent ones).
    for j in range(300):
        ez.autodiff(ez.llvm_ir(IR.format(c=-2.0 - j), "f"), ez.Reverse, ez.Active, ez.Active)
    df = ez.autodiff(ez.llvm_ir(IR.format(c=7.0), "f"), ez.Reverse, ez.Active, ez.Active)
    assert abs(df(1.5, 1.0)[1] - 21.0) < 1e-9
    return {
        "what": "fill",
        "mib": mib,
        "loaded_before_full": i,
        "error": error,
        "jit_full": full,
        "jit_after_drop": reservation(),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    what = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    if what == "tapes":
        result = tapes(n or 10_000)
    elif what == "fill":
        result = fill(n or 1)
    else:
        result = measure(what, n or {"numba": 1000, "numba-only": 1000}.get(what, 10_000))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
