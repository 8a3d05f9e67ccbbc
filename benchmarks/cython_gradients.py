"""Gradient / primal time ratio of enzyme_py on the same kernels in Numba, C and Cython.

Usage::

    python benchmarks/cython_gradients.py [--quick] [--out DIR]

Kernels: Rosenbrock (n = 10^6) and the explicit-Euler 1-D heat equation (1000 cells x
1000 steps, two work buffers allocated inside; loss 0.5 * sum((u - target)^2)), as in
``benchmarks/kernels.py``, each written three times:

- Numba: ``kernels.rosenbrock`` / ``kernels.heat_loss``, the primal the function itself;
- C through ``ez.c`` (pointers and lengths; ``malloc`` buffers);
- Cython through ``ez.cython`` (``const double[::1]`` memoryviews, ``malloc`` buffers,
  ``boundscheck``/``wraparound`` off, ``noexcept nogil``), plus Rosenbrock over a
  strided ``const double[:]`` view (strides passed), as a ``def`` function (its C
  implementation differentiated) and heat from the build without
  ``noalias`` on the memoryviews (what calls with overlapping arrays get).

C and Cython primals are the functions themselves called through enzyme_py (``m.f(...)``).
The gradient is ``ez.grad`` with respect to x / u0, timed as the median and as the
best of 15 runs (3 with --quick) after a warm-up call, and checked against central
finite differences on a few coordinates. ``--quick`` runs tiny sizes. Results go to
``cython_gradients.json`` / ``.md`` in ``--out`` (default ``benchmarks/results/``).
Nothing asserts on the times.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import enzyme_py as ez
from benchmarks import kernels
from benchmarks.common import best_time, fd_spot_error, gradient_report_main, median_time

C_SOURCE = r"""
#include <stdlib.h>

double rosenbrock(const double *x, long n) {
    double s = 0.0;
    for (long i = 0; i < n - 1; i++) {
        double a = x[i + 1] - x[i] * x[i];
        double b = 1.0 - x[i];
        s += 100.0 * a * a + b * b;
    }
    return s;
}

double heat_loss(const double *u0, const double *target, long n, long steps) {
    double *a = malloc(n * sizeof(double));
    double *b = malloc(n * sizeof(double));
    for (long i = 0; i < n; i++) a[i] = u0[i];
    for (long s = 0; s < steps; s++) {
        b[0] = a[0];
        b[n - 1] = a[n - 1];
        for (long i = 1; i < n - 1; i++)
            b[i] = a[i] + 0.25 * (a[i - 1] - 2.0 * a[i] + a[i + 1]);
        double *t = a; a = b; b = t;
    }
    double s = 0.0;
    for (long i = 0; i < n; i++) {
        double d = a[i] - target[i];
        s += d * d;
    }
    free(a);
    free(b);
    return 0.5 * s;
}
"""

CYTHON_SOURCE = r"""
cimport cython
from libc.stdlib cimport malloc, free

@cython.boundscheck(False)
@cython.wraparound(False)
cdef double rosenbrock(const double[::1] x) noexcept nogil:
    cdef double s = 0.0, a, b
    cdef Py_ssize_t i
    for i in range(x.shape[0] - 1):
        a = x[i + 1] - x[i] * x[i]
        b = 1.0 - x[i]
        s += 100.0 * a * a + b * b
    return s

@cython.boundscheck(False)
@cython.wraparound(False)
cdef double rosenbrock_strided(const double[:] x) noexcept nogil:
    cdef double s = 0.0, a, b
    cdef Py_ssize_t i
    for i in range(x.shape[0] - 1):
        a = x[i + 1] - x[i] * x[i]
        b = 1.0 - x[i]
        s += 100.0 * a * a + b * b
    return s

@cython.boundscheck(False)
@cython.wraparound(False)
def rosenbrock_def(const double[::1] x):
    cdef double s = 0.0, a, b
    cdef Py_ssize_t i
    for i in range(x.shape[0] - 1):
        a = x[i + 1] - x[i] * x[i]
        b = 1.0 - x[i]
        s += 100.0 * a * a + b * b
    return s

@cython.boundscheck(False)
@cython.wraparound(False)
cdef double heat_loss(const double[::1] u0, const double[::1] target,
                      Py_ssize_t steps) noexcept nogil:
    cdef Py_ssize_t n = u0.shape[0], i, k
    cdef double *a = <double *>malloc(n * sizeof(double))
    cdef double *b = <double *>malloc(n * sizeof(double))
    cdef double *t
    cdef double s = 0.0, d
    for i in range(n):
        a[i] = u0[i]
    for k in range(steps):
        b[0] = a[0]
        b[n - 1] = a[n - 1]
        for i in range(1, n - 1):
            b[i] = a[i] + 0.25 * (a[i - 1] - 2.0 * a[i] + a[i + 1])
        t = a
        a = b
        b = t
    for i in range(n):
        d = a[i] - target[i]
        s += d * d
    free(a)
    free(b)
    return 0.5 * s
"""


def row(
    kernel: str, front: str, primal: Callable[..., float], grad: Any, args: list[Any], repeats: int
) -> dict[str, Any]:
    primal_s = median_time(lambda: primal(*args), repeats)
    gradient_s = median_time(lambda: grad(*args), repeats)
    primal_best = best_time(lambda: primal(*args), repeats)
    gradient_best = best_time(lambda: grad(*args), repeats)
    return {
        "kernel": kernel,
        "frontend": front,
        "primal_s": primal_s,
        "gradient_s": gradient_s,
        "ratio": gradient_s / primal_s,
        "primal_best_s": primal_best,
        "gradient_best_s": gradient_best,
        "best_ratio": gradient_best / primal_best,
        "fd_rel_error": fd_spot_error(primal, args, [grad(*args)], [0]),
    }


def run(quick: bool) -> list[dict[str, Any]]:
    repeats = 3 if quick else 15
    n = 1000 if quick else 1_000_000
    cells, steps = (32, 20) if quick else (1000, 1000)
    c = ez.c(C_SOURCE)
    cy = ez.cython(CYTHON_SOURCE)
    (x,) = kernels.rosenbrock_inputs(n)
    u0, target = kernels.heat_inputs(cells)
    rosen = f"Rosenbrock n={n}"
    heat = f"heat {cells} cells x {steps} steps"
    assert cy.rosenbrock.alias_safe is None  # one array: nothing to overlap, no twin
    heat_safe = cy.heat_loss.alias_safe()  # the build without noalias on the memoryviews
    cases: list[tuple[str, str, Any, list[Any]]] = [
        (rosen, "Numba", kernels.rosenbrock, [x]),
        (rosen, "C (ez.c)", c.rosenbrock, [x, n]),
        (rosen, "Cython double[::1]", cy.rosenbrock, [x]),
        (rosen, "Cython double[:] (strided)", cy.rosenbrock_strided, [x]),
        (rosen, "Cython def, double[::1]", cy.rosenbrock_def, [x]),
        (heat, "Numba", kernels.heat_loss, [u0, target, steps]),
        (heat, "C (ez.c)", c.heat_loss, [u0, target, cells, steps]),
        (heat, "Cython double[::1]", cy.heat_loss, [u0, target, steps]),
        (heat, "Cython, no noalias", heat_safe, [u0, target, steps]),
    ]
    return [row(k, front, f, ez.grad(f), args, repeats) for k, front, f, args in cases]


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        f"Measured {meta['date']} on {meta['machine']} ({meta['cpus']} CPUs), "
        f"Python {meta['python']}, NumPy {meta['numpy']}, Cython {meta['cython']}, "
        f"Enzyme {meta['enzyme']}.",
        "",
        "Median and best (shortest) of the runs; the best ratio is the steadier one where "
        "other processes share the CPUs.",
        "",
        "| kernel | frontend | primal | gradient | gradient / primal | best primal "
        "| best gradient | best ratio | FD check |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kernel']} | {r['frontend']} | {1e3 * r['primal_s']:.3f} ms "
            f"| {1e3 * r['gradient_s']:.3f} ms | {r['ratio']:.2f} "
            f"| {1e3 * r['primal_best_s']:.3f} ms | {1e3 * r['gradient_best_s']:.3f} ms "
            f"| {r['best_ratio']:.2f} | {r['fd_rel_error']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def _versions() -> dict[str, str]:
    import Cython

    return {"cython": Cython.__version__}


def main(argv: list[str] | None = None) -> int:
    return gradient_report_main(
        argv, __doc__.split("\n")[0], "cython_gradients", run, markdown, _versions
    )


if __name__ == "__main__":
    sys.exit(main())
