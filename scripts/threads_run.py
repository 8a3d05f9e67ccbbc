"""Derivatives called from several threads at once (issue 22's thread figure, now with
split mode and code unloading on).

    python scripts/threads_run.py [THREADS] [SECONDS]

Each thread has its own shadows and calls, in turn, a combined Reverse derivative, the
two halves of a ReverseSplit derivative (the reverse half from its own tape), ez.vjp
with its pullback, and a Forward derivative, of one Numba function, and checks every
number against the analytic gradient. One more thread keeps making and dropping
distinct IR derivatives (builds, loads, code removed from the JIT) meanwhile. Prints
one JSON line: calls, errors, wrong numbers, builds.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from typing import Any

import numba
import numpy as np

import enzyme_py as ez


@numba.njit
def energy(x: Any, k: float) -> float:
    e = 0.0
    for i in range(x.shape[0]):
        e += k * x[i] * x[i] * math.sin(x[i])
    return e


def gradient(x: np.ndarray, k: float) -> np.ndarray:
    return k * (2 * x * np.sin(x) + x * x * np.cos(x))


IR = (
    "define double @f(double %x) {{\n  %y = fmul double %x, {c!r}\n"
    "  %z = fmul double %y, %x\n  ret double %z\n}}\n"
)


def main(threads: int, seconds: float) -> None:
    rev = ez.autodiff(energy, ez.Reverse, ez.Duplicated, ez.Const, ez.Active)
    split = ez.autodiff(energy, ez.ReverseSplit, ez.Duplicated, ez.Const, ez.Active)
    fwd = ez.autodiff(energy, ez.Forward, ez.Dual, ez.Const, ez.Dual)
    x0 = np.linspace(0.1, 1.0, 8)  # built before the clock starts
    rev(x0, np.zeros(8), 3.0, 1.0)
    split.reverse(split.forward(x0, np.zeros(8), 3.0)[1], x0, np.zeros(8), 3.0, 1.0)
    ez.vjp(energy, x0, 3.0)[1](1.0)
    fwd(x0, np.ones(8), 3.0)
    stop = time.monotonic() + seconds
    counts = {"calls": 0, "errors": 0, "wrong": 0, "builds": 0}
    lock = threading.Lock()
    problems: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        calls = wrong = errors = 0
        while time.monotonic() < stop:
            x = rng.normal(size=int(rng.integers(1, 64)))
            want = gradient(x, 3.0)
            try:
                dx = np.zeros_like(x)
                rev(x, dx, 3.0, 1.0)
                ok = np.allclose(dx, want, rtol=1e-12, atol=1e-12)
                dx[:] = 0
                _, tape = split.forward(x, dx, 3.0)
                split.reverse(tape, x, dx, 3.0, 1.0)
                ok = ok and np.allclose(dx, want, rtol=1e-12, atol=1e-12)
                _, pull = ez.vjp(energy, x, 3.0)
                ok = ok and np.allclose(pull(1.0)[0], want, rtol=1e-12, atol=1e-12)
                t = rng.normal(size=x.shape)
                _, dy = fwd(x, t, 3.0)
                ok = ok and math.isclose(dy, float(want @ t), rel_tol=1e-9, abs_tol=1e-12)
                calls += 4
                wrong += not ok
            except Exception as exc:  # counted and shown
                errors += 1
                with lock:
                    problems.append(f"{type(exc).__name__}: {exc}"[:300])
        with lock:
            counts["calls"] += calls
            counts["wrong"] += wrong
            counts["errors"] += errors

    def builder() -> None:
        i = 0
        while time.monotonic() < stop:
            c = 1.0 + i * 1e-6
            df = ez.autodiff(ez.llvm_ir(IR.format(c=c), "f"), ez.Reverse, ez.Active, ez.Active)
            if df(1.5, 1.0)[1] != 3.0 * c:
                with lock:
                    counts["wrong"] += 1
            i += 1
        with lock:
            counts["builds"] = i

    pool = [threading.Thread(target=worker, args=(s,)) for s in range(threads)]
    pool.append(threading.Thread(target=builder))
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    print(json.dumps({"threads": threads, "seconds": seconds, **counts, "problems": problems[:5]}))


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 8,
        float(sys.argv[2]) if len(sys.argv) > 2 else 20.0,
    )
