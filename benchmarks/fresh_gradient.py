"""What a fresh zeroed gradient costs: ez.grad's new array per call against reused ones.

Usage::

    python benchmarks/fresh_gradient.py [--quick] [--out DIR]

For Rosenbrock (``benchmarks/kernels.py``) at n = 10^5, 10^6 and 10^7, in this process,
the median time per call (after a warm-up) and the minor page faults per call of:

- the Numba primal;
- ``ez.grad(f)(x)``: a new zeroed gradient each call (NumPy's ``calloc``);
- the same derivative given one gradient array, reused, zeroed with ``fill(0)`` before
  each call (what a pool of buffers would have to do);
- that derivative given one gradient array never zeroed (a lower bound, not a correct
  gradient after the first call).

Each call's gradient is checked against the analytic one on the ``ez.grad`` row. The
question it answers: would a pool of gradient buffers pay (issue 21)? Results go to
``fresh_gradient.json`` / ``.md`` in ``--out`` (default ``benchmarks/results/``).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

import enzyme_py as ez
from benchmarks import kernels
from benchmarks.common import gradient_report_main


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """(median seconds, minor page faults) per call, after one warm-up call."""
    fn()
    times = []
    before = _faults()
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), (_faults() - before) / repeats


def bench(n: int, repeats: int) -> dict[str, Any]:
    (x,) = kernels.rosenbrock_inputs(n)
    f = kernels.rosenbrock
    grad = ez.grad(f)
    df = ez.autodiff(f, ez.Reverse, ez.Duplicated, ez.ActiveOnly)
    kept = np.zeros(n)

    def refilled() -> None:
        kept.fill(0.0)
        df(x, kept, 1.0)

    rows = {
        "primal": _timed(lambda: f(x), repeats),
        "fresh": _timed(lambda: grad(x), repeats),
        "reused_filled": _timed(refilled, repeats),
        "reused_unzeroed": _timed(lambda: df(x, kept, 1.0), repeats),
    }
    expected = kernels.rosenbrock_gradient(x)
    error = float(np.max(np.abs(grad(x) - expected)) / np.max(np.abs(expected)))
    primal = rows["primal"][0]
    return {
        "kernel": f"Rosenbrock n={n}",
        **{f"{k}_s": v[0] for k, v in rows.items()},
        **{f"{k}_faults": v[1] for k, v in rows.items()},
        **{f"{k}_ratio": v[0] / primal for k, v in rows.items() if k != "primal"},
        "rel_error": error,
        "load": os.getloadavg()[0],
    }


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Measured {meta['date']} on {meta['machine']} ({meta['cpus']} CPUs), "
        f"NumPy {meta['numpy']}, Enzyme {meta['enzyme']}. Time / primal "
        "(minor page faults per call).",
        "",
        "| kernel | primal | ez.grad (fresh zeros) | reused, fill(0) | reused, not zeroed "
        "| load | error |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        cells = [
            f"{r[f'{k}_ratio']:.2f} ({r[f'{k}_faults']:.0f})"
            for k in ("fresh", "reused_filled", "reused_unzeroed")
        ]
        lines.append(
            f"| {r['kernel']} | {1e3 * r['primal_s']:.3f} ms ({r['primal_faults']:.0f}) | "
            + " | ".join(cells)
            + f" | {r['load']:.1f} | {r['rel_error']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def run(quick: bool) -> list[dict[str, Any]]:
    if quick:
        return [bench(1000, 5)]
    return [bench(n, 200 if n <= 10**6 else 30) for n in (10**5, 10**6, 10**7)]


def main(argv: list[str] | None = None) -> int:
    return gradient_report_main(
        argv, __doc__.split("\n")[0], "fresh_gradient", run, markdown, lambda: {}
    )


if __name__ == "__main__":
    sys.exit(main())
