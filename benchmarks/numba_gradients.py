"""Gradient / primal time ratio of enzyme_py on Numba kernels.

Usage::

    python benchmarks/numba_gradients.py [--quick] [--out DIR]

For each kernel of ``benchmarks/kernels.py`` (Rosenbrock with n = 10^6; the ADBench
GMM objective with d = 10, k = 25, n = 10^4), in this process:

- the primal: the Numba function itself;
- the gradient: ``ez.grad`` / ``ez.autodiff(..., ez.Reverse, ..., ez.ActiveOnly)``,
  with respect to every float array parameter (GMM: alphas, means, icf);

each timed as the median of at least 5 runs after a warm-up call, and the gradient
checked against central finite differences on a few coordinates. ``--quick`` runs
tiny sizes. Results go to ``numba_gradients.json`` / ``.md`` in ``--out``
(default ``benchmarks/results/``). Nothing asserts anything about the times.
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import enzyme_py as ez
from benchmarks import kernels
from benchmarks.common import fd_spot_error, gradient_report_main, median_time


def bench_rosenbrock(n: int, repeats: int) -> dict[str, Any]:
    (x,) = kernels.rosenbrock_inputs(n)
    grad = ez.grad(kernels.rosenbrock)
    primal = median_time(lambda: kernels.rosenbrock(x), repeats)
    gradient = median_time(lambda: grad(x), repeats)
    error = fd_spot_error(kernels.rosenbrock, [x], [grad(x)], [0])
    return {
        "kernel": f"Rosenbrock n={n}",
        "primal_s": primal,
        "gradient_s": gradient,
        "ratio": gradient / primal,
        "fd_rel_error": error,
    }


def bench_gmm(d: int, k: int, n: int, repeats: int) -> dict[str, Any]:
    args = list(kernels.gmm_inputs(d, k, n))
    grad = ez.grad(kernels.gmm_objective, argnums=(0, 1, 2))
    primal = median_time(lambda: kernels.gmm_objective(*args), repeats)
    gradient = median_time(lambda: grad(*args), repeats)
    error = fd_spot_error(kernels.gmm_objective, args, list(grad(*args)), [0, 1, 2])
    return {
        "kernel": f"GMM d={d} k={k} n={n}",
        "primal_s": primal,
        "gradient_s": gradient,
        "ratio": gradient / primal,
        "fd_rel_error": error,
    }


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Measured {meta['date']} on {meta['machine']} ({meta['cpus']} CPUs), "
        f"Python {meta['python']}, NumPy {meta['numpy']}, Numba {meta['numba']}, "
        f"Enzyme {meta['enzyme']}.",
        "",
        "| kernel | Numba primal | enzyme_py gradient | gradient / primal | FD check |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kernel']} | {1e3 * r['primal_s']:.3f} ms | {1e3 * r['gradient_s']:.3f} ms "
            f"| {r['ratio']:.2f} | {r['fd_rel_error']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def run(quick: bool) -> list[dict[str, Any]]:
    repeats = 3 if quick else 7
    return [
        bench_rosenbrock(1000 if quick else 1_000_000, repeats),
        bench_gmm(*((3, 4, 50) if quick else (10, 25, 10_000)), repeats),
    ]


def _versions() -> dict[str, str]:
    import numba

    return {"numba": numba.__version__}


def main(argv: list[str] | None = None) -> int:
    return gradient_report_main(
        argv, __doc__.split("\n")[0], "numba_gradients", run, markdown, _versions
    )


if __name__ == "__main__":
    sys.exit(main())
