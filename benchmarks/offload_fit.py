"""A reverse kernel whose indices all add into the same small shadow.

Usage::

    python benchmarks/offload_fit.py [--quick] [--out DIR]

The kernel is the squared residual of a degree-7 polynomial fit at one data point,
``loss[i] = (sum_k c[k] t[i]^k - y[i])^2``; its reverse derivative with respect to the
8 coefficients (``Duplicated`` c: every index adds into all of ``dc``) is launched over
n = 2^22 points on the CPU device with one thread and with all cores, and on each CUDA
GPU when there is one (host arrays: transfers included). On several CPU threads each
thread adds into its own copy of ``dc``, summed at the end; atomic adds from all
threads into the same 8 entries would contend for one cache line. The result is
checked against the analytic gradient. Median of at least 5 runs after a warm-up.
Results go to ``offload_fit.json`` / ``.md`` in ``--out`` (default
``benchmarks/results/``). No timing is asserted.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

import enzyme_py as ez

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import launch_rows, write_launch_results


def squared_residual(i, t, y, c, loss):
    value = 0.0
    for k in range(c.shape[0] - 1, -1, -1):  # Horner
        value = value * t[i] + c[k]
    loss[i] = (value - y[i]) ** 2


def main(argv: list[str] | None = None) -> int:
    import numba

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args(argv)
    n = 4096 if args.quick else 1 << 22
    repeats = 3 if args.quick else 7
    rng = np.random.default_rng(0)
    t, y = rng.uniform(-1, 1, n), rng.normal(size=n)
    c = rng.normal(size=8)
    kernel = ez.offload.kernel(numba.njit(squared_residual))
    gradient = ez.autodiff(kernel, ez.Reverse, ez.Const, ez.Const, ez.Duplicated, ez.Duplicated)

    def run(device: Any, threads: int | None = None, arrays: Any = None) -> np.ndarray:
        dc, loss, dloss = arrays or (np.zeros_like(c), np.zeros(n), np.ones(n))
        gradient.launch(n, t, y, c, dc, loss, dloss, device=device, threads=threads)
        return dc

    powers = t[:, None] ** np.arange(c.size)
    expected = 2 * ((powers @ c - y)[:, None] * powers).sum(axis=0)
    error = float(np.max(np.abs(run(None) - expected)) / np.max(np.abs(expected)))
    # Timed launches reuse their arrays: the work does not depend on the values (the
    # reverse pass zeroes dloss), and allocating them would be timed too.
    arrays = (np.zeros_like(c), np.zeros(n), np.ones(n))
    rows = launch_rows(lambda device, threads: run(device, threads, arrays), repeats)
    table = write_launch_results(
        args.out,
        "offload_fit",
        "Reverse derivative of a polynomial fit's squared residuals with respect to its 8 "
        f"coefficients, n = {n}; relative error against the analytic gradient: {error:.1e}",
        rows,
        n=n,
        quick=args.quick,
        check_error=error,
    )
    print(table)
    return 0 if error < 1e-10 else 1


if __name__ == "__main__":
    sys.exit(main())
