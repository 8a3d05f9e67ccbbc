"""How late Ctrl-C arrives (issue 22): SIGINT sent to this process at a known time,
KeyboardInterrupt caught; the latency is the time between.

    python scripts/interrupt_latency.py [REPEATS]

Cases: an isolated build (Enzyme in the forked child; the child made to take 5 s with
ENZYME_PY_TEST_SLOW_BUILD_MS, and a real build of width 64), the second Numba compile
(Python, in this process), and a derivative call that runs about 2 s (C, combined and
split mode), interrupted 0.5 s in. Prints one JSON line: per case, the latencies in
seconds (min / median / max) and whether a child process was left.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

os.environ.setdefault("ENZYME_PY_CACHE_DIR", tempfile.mkdtemp(prefix="ez-interrupt-"))

import enzyme_py as ez

SLOW_C = """
double slow(const double *x, int n, long reps) {
  double s = 0;
  for (long r = 0; r < reps; ++r)
    for (int i = 0; i < n; ++i) s += __builtin_sin(x[i] * (1.0 + 1e-9 * r));
  return s;
}
"""


def interrupted_after(delay: float, work: Callable[[], Any]) -> float | None:
    """Seconds from SIGINT (sent ``delay`` s in) to KeyboardInterrupt; None if none came."""
    sent: list[float] = []

    def fire() -> None:
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(delay, fire)
    timer.start()
    try:
        work()
    except KeyboardInterrupt:
        return time.monotonic() - sent[0]
    finally:
        timer.cancel()
    return None


def child_left() -> bool:
    try:
        return os.waitpid(-1, os.WNOHANG) != (0, 0)
    except ChildProcessError:
        return False


def summary(values: list[float | None]) -> dict[str, Any]:
    got = [v for v in values if v is not None]
    if not got:
        return {"none_raised": len(values)}
    return {
        "min": round(min(got), 3),
        "median": round(statistics.median(got), 3),
        "max": round(max(got), 3),
        "none_raised": len(values) - len(got),
    }


def main(repeats: int) -> None:
    import numba

    results: dict[str, Any] = {}
    cube = ez.llvm_ir(
        "define double @cube(double %x) {\n %y = fmul double %x, %x\n"
        " %z = fmul double %y, %x\n ret double %z\n}\n",
        "cube",
    )
    lat = []
    for i in range(repeats):
        os.environ["ENZYME_PY_TEST_SLOW_BUILD_MS"] = "5000"
        try:
            lat.append(
                interrupted_after(
                    0.5,
                    lambda i=i: ez.autodiff(cube, ez.Reverse, ez.Active, ez.Active, width=1 + i),
                )
            )
        finally:
            del os.environ["ENZYME_PY_TEST_SLOW_BUILD_MS"]
    results["build (child sleeps 5 s)"] = {**summary(lat), "child_left": child_left()}

    @numba.njit
    def wide(x: Any) -> Any:
        s = 0.0
        for i in range(x.shape[0]):
            s += np.sin(x[i]) * x[i]
        return s

    x = np.linspace(0.1, 1.0, 16)
    wide(x)
    lat = []
    for i in range(repeats):
        # A real build (width 64: about 1.3 s of Enzyme and LLVM), fresh each time.
        os.environ["ENZYME_PY_CACHE_DIR"] = tempfile.mkdtemp(prefix="ez-interrupt-")
        lat.append(
            interrupted_after(
                0.6,
                lambda w=64 - i: ez.autodiff(wide, ez.Forward, ez.Dual, ez.Dual, width=w)(
                    x, np.ones((w, 16))
                ),
            )
        )
    results["build (width 64, real)"] = {**summary(lat), "child_left": child_left()}

    lat = []
    for i in range(repeats):
        # The second Numba compile (in this process), for a fresh closure each time.
        def make(c: float) -> Any:
            @numba.njit
            def fresh(x: Any) -> Any:
                s = 0.0
                for j in range(x.shape[0]):
                    s += c * np.exp(np.sin(x[j])) * np.cos(x[j] * x[j])
                return s

            return fresh

        g = make(1.0 + i)
        g(x)
        lat.append(interrupted_after(0.05, lambda f=g: ez.grad(f)(x)))
    results["Numba's second compile"] = summary(lat)

    m = ez.c(SLOW_C)
    xs = np.linspace(0.1, 1.0, 1000)
    reps = 1
    df = ez.autodiff(m.slow, ez.Reverse, ez.Duplicated, ez.Const, ez.Const, ez.Active)
    dx = np.zeros_like(xs)
    while True:  # reps for a call of about 2 s
        t0 = time.perf_counter()
        df(xs, dx, 1000, reps, 1.0)
        took = time.perf_counter() - t0
        if took > 0.2:
            reps = int(reps * 2.0 / took)
            break
        reps *= 4
    t0 = time.perf_counter()
    df(xs, dx, 1000, reps, 1.0)
    call_s = time.perf_counter() - t0
    lat = [interrupted_after(0.5, lambda: df(xs, dx, 1000, reps, 1.0)) for _ in range(repeats)]
    results["call (Reverse, ~2 s)"] = {**summary(lat), "call_s": round(call_s, 2)}
    split = ez.autodiff(m.slow, ez.ReverseSplit, ez.Duplicated, ez.Const, ez.Const, ez.Active)
    lat = [
        interrupted_after(0.5, lambda: split.forward(xs, dx, 1000, reps)) for _ in range(repeats)
    ]
    results["call (ReverseSplit forward half, ~2 s)"] = summary(lat)
    print(json.dumps(results))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
